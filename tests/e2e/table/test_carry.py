"""``sink.max-carry-time`` in SQL jobs: rows carried across checkpoints in the writer's state.

The first test runs a checkpointed ``gcp-pubsub`` job whose rows (fewer than the 500 that send
a destination's batch) are all carried for an hour: after a completed checkpoint nothing has
reached the topic, the writer's Python worker is killed, and every row is read back after the
restart; the rows before the checkpoint come back only from the operator's state (the source
replays the rows after it). The second shows where the factory refuses the option at planning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyflink.common import JobStatus

from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.restore import Failover, checkpoint_completed
from tests.support.tables import (
    failover_table_env,
    kill_the_python_worker,
    make_table_env,
    planning_error,
    python_workers,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

ROWS = 400


def test_rows_carried_at_a_checkpoint_come_back_after_the_worker_is_killed(
    project: str, tmp_path: Path
) -> None:
    topic = unique("carried")
    make_topics(project, [topic])
    failover = Failover(tmp_path / "failover")
    t_env = failover_table_env(failover, ROWS, rows_per_second=40)
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE carried (id BIGINT) WITH (
            'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{topic}',
            'sink.max-carry-time' = '1h')"""
    )
    earlier = set(python_workers())
    result = t_env.execute_sql("INSERT INTO carried SELECT id FROM source")
    wait_for(lambda: checkpoint_completed(failover.checkpoints, 2), "two completed checkpoints")
    # Without carrying, each of these checkpoints would have sent its rows.
    assert pull_all(project, topic, expect=1, timeout_s=2.0, quiet_s=1.0) == []
    kill_the_python_worker(earlier)
    assert result.get_job_client().get_job_status().result() != JobStatus.FAILED
    result.wait()
    failover.assert_restored()
    pulled = pull_all(project, topic, expect=ROWS, timeout_s=60.0)
    ids = [json.loads(m.data)["id"] for m in pulled]
    lost = set(range(1, ROWS + 1)) - set(ids)
    assert not lost, f"lost {len(lost)}: {sorted(lost)[:10]}"


@pytest.mark.parametrize(
    ("columns", "options", "why"),
    [
        (
            "id BIGINT, region STRING, PRIMARY KEY (id) NOT ENFORCED",
            {},
            "on a table with a PRIMARY KEY: the carried rows are operator state, which a new "
            "parallelism hands out without regard to keys, so a key's upserts could change "
            "subtask and order",
        ),
        (
            "id BIGINT, region STRING",
            {"write-method": "buffered-stream"},
            "with an exactly-once write method: it commits every row of a checkpoint after it, "
            "so none can wait",
        ),
    ],
)
def test_carrying_is_refused_at_planning_where_rows_could_not_wait_or_keep_their_order(
    columns: str, options: dict[str, str], why: str
) -> None:
    t_env = make_table_env()
    values = {
        "connector": "gcp-bigquery",
        "project": "p",
        "dataset": "d",
        "table": "t",
        "sink.max-carry-time": "30s",
        **options,
    }
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in values.items())
    t_env.execute_sql(f"CREATE TEMPORARY TABLE refused ({columns}) WITH ({listed})")
    assert (
        "ValidationException: sink 'refused': option 'sink.max-carry-time' of connector "
        f"'gcp-bigquery' is not available {why}; leave it unset."
    ) in planning_error(t_env, "INSERT INTO refused VALUES (1, 'eu')")
