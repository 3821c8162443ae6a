"""The ``gcp-pubsub`` SQL connector in MiniCluster jobs, read back from the emulator.

One job writes through a DDL table and a ``TableDescriptor`` table at once (a statement set);
the planning tests submit nothing; one test runs SQL from a Java program without any Python
client; the last kills the writer's Python worker of a checkpointed job and counts what landed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyflink.common import JobStatus
from pyflink.table import DataTypes, Schema, TableDescriptor

from pyflink_gcp.pubsub.attributes import record_digest
from pyflink_gcp.table.option_model import OptionError
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.tools import bridge_build
from tests.support.jobs import REPO_ROOT
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

REGIONS = ("eu", "us", "asia")
ROWS = [
    (i, REGIONS[i % 3], f"{i}.25", f"2024-03-0{1 + i % 3} 12:00:00.{i:06d}", f"c{i % 2}")
    for i in range(1, 10)
]
VALUES = ", ".join(
    f"({i}, '{r}', CAST({a} AS DECIMAL(10, 2)), TIMESTAMP '{t}', '{c}', X'0{i}', "
    f"ROW('web', TIMESTAMP '2024-01-01 00:00:00.12345{i}'))"
    for i, r, a, t, c in ROWS
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
COLUMNS = (
    "id BIGINT, region STRING, amount DECIMAL(10, 2), ts TIMESTAMP(6), customer STRING, "
    "tag BYTES, info ROW<channel STRING, seen TIMESTAMP(6)>"
)


def test_ddl_and_descriptor_tables_route_rows_to_their_template_topics(project: str) -> None:
    ddl_prefix, desc_prefix = unique("sql"), unique("desc")
    make_topics(project, [f"{p}-{r}" for p in (ddl_prefix, desc_prefix) for r in REGIONS])
    t_env = make_table_env()
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE by_region ({COLUMNS}) WITH (
            'connector' = 'gcp-pubsub', 'project' = '{project}',
            'topic' = '{ddl_prefix}-{{region}}', 'sink.buffer-flush.max-rows' = '4')"""
    )
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.BIGINT())
        .column("region", DataTypes.STRING())
        .column("amount", DataTypes.DECIMAL(10, 2))
        .column("ts", DataTypes.TIMESTAMP(6))
        .column("customer", DataTypes.STRING())
        .column("tag", DataTypes.BYTES())
        .column(
            "info",
            DataTypes.ROW(
                [
                    DataTypes.FIELD("channel", DataTypes.STRING()),
                    DataTypes.FIELD("seen", DataTypes.TIMESTAMP(6)),
                ]
            ),
        )
        .build()
    )
    descriptor = (
        TableDescriptor.for_connector("gcp-pubsub")
        .schema(schema)
        .option("project", project)
        .option("topic", desc_prefix + "-{region}")
        .option("attributes.columns", "region,id")
        .option("ordering-key.column", "customer")
        .option("sink.parallelism", "1")
        .build()
    )
    t_env.create_temporary_table("described", descriptor)
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO by_region VALUES {VALUES}")
    statements.add_insert_sql(f"INSERT INTO described VALUES {VALUES}")
    statements.execute().wait()

    for region in REGIONS:
        expected = [row for row in ROWS if row[1] == region]
        pulled = pull_all(project, f"{ddl_prefix}-{region}", expect=len(expected))
        messages = sorted((json.loads(m.data) for m in pulled), key=lambda m: m["id"])
        assert messages == [
            {
                "id": row[0],
                "region": region,
                "amount": row[2],
                "ts": datetime.fromisoformat(row[3]).isoformat(),
                "customer": row[4],
                "tag": base64.b64encode(bytes([row[0]])).decode(),
                # Nested timestamps travel at millisecond precision.
                "info": {"channel": "web", "seen": "2024-01-01T00:00:00.123000"},
            }
            for row in expected
        ], region
        assert all(m.attributes == {} and m.ordering_key == "" for m in pulled)

        described = pull_all(project, f"{desc_prefix}-{region}", expect=len(expected))
        assert sorted(json.loads(m.data)["id"] for m in described) == [r[0] for r in expected]
        for m in described:
            row = ROWS[json.loads(m.data)["id"] - 1]
            assert m.attributes == {"region": region, "id": str(row[0])}
            assert m.ordering_key == row[4]


def test_provenance_options_send_each_rows_rowtime_and_record_id(project: str) -> None:
    """Rows of a table with a rowtime arrive with its event time and a digest record id."""
    topic = unique("prov")
    make_topics(project, [topic])
    t_env = make_table_env(parallelism=1)
    t_env.execute_sql(
        """CREATE TEMPORARY TABLE source (id BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
        WITH ('connector' = 'datagen', 'number-of-rows' = '3', 'fields.id.kind' = 'sequence',
              'fields.id.start' = '1', 'fields.id.end' = '3', 'fields.ts.max-past' = '1d')"""
    )
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE provenance (id BIGINT, ts TIMESTAMP(3)) WITH (
            'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{topic}',
            'attributes.event-time' = 'event-time', 'attributes.record-id' = 'record-id')"""
    )
    t_env.execute_sql("INSERT INTO provenance SELECT id, ts FROM source").wait()

    pulled = pull_all(project, topic, expect=3)
    assert sorted(json.loads(m.data)["id"] for m in pulled) == [1, 2, 3]
    for m in pulled:
        # The rowtime is each message's event time: the row's ts as epoch milliseconds (UTC).
        ts = datetime.fromisoformat(json.loads(m.data)["ts"]).replace(tzinfo=UTC)
        event_time = {"event-time": str((ts - EPOCH) // timedelta(milliseconds=1))}
        assert set(m.attributes) == {"event-time", "record-id"}
        assert m.attributes["event-time"] == event_time["event-time"]
        resource = f"projects/{project}/topics/{topic}"
        assert m.attributes["record-id"] == record_digest(resource, m.data, "", event_time)


def _pubsub_table(t_env, name: str, **options: str) -> None:
    values = {"connector": "gcp-pubsub", "project": "p", "topic": "t-{region}", **options}
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in values.items() if v is not None)
    t_env.execute_sql(f"CREATE TEMPORARY TABLE {name} (id BIGINT, region STRING) WITH ({listed})")


def test_mistakes_fail_at_planning_with_exact_messages() -> None:
    """Unknown key, missing key, bad value, unknown placeholder, updating query, no metrics."""
    t_env = make_table_env()
    insert = "INSERT INTO {} VALUES (1, 'eu')"

    _pubsub_table(t_env, "unknown_key", tpoic="x")
    assert (
        "ValidationException: Unsupported options found for 'gcp-pubsub'.\n\nUnsupported "
        "options:\n\ntpoic\n\nSupported options:\n\nattributes.columns\n"
    ) in planning_error(t_env, insert.format("unknown_key"))

    _pubsub_table(t_env, "missing_key", topic=None)
    assert (
        "ValidationException: One or more required options are missing.\n\n"
        "Missing required options are:\n\ntopic"
    ) in planning_error(t_env, insert.format("missing_key"))

    _pubsub_table(t_env, "bad_value", **{"sink.buffer-flush.interval": "soon"})
    message = (
        "Invalid value for option 'sink.buffer-flush.interval' of connector 'gcp-pubsub': "
        "expected a duration such as 500ms, 10s, 5min, 1h or 1d of at least 1ms, got 'soon'."
    )
    assert f"ValidationException: {message}\n" in planning_error(t_env, insert.format("bad_value"))
    # The Python parser (the same list, on the worker) says the same.
    with pytest.raises(OptionError) as python_side:
        parse(
            "gcp-pubsub", {"project": "p", "topic": "t", "sink.buffer-flush.interval": "soon"}, ()
        )
    assert str(python_side.value) == message

    # A provenance attribute's name is checked against Pub/Sub's key limit, in Java too.
    _pubsub_table(t_env, "long_attribute", **{"attributes.record-id": "k" * 257})
    assert (
        "ValidationException: Invalid value for option 'attributes.record-id' of connector "
        f"'gcp-pubsub': expected a text of 1 to 256 bytes, got '{'k' * 257}'.\n"
    ) in planning_error(t_env, insert.format("long_attribute"))
    same = {"attributes.event-time": "at", "attributes.record-id": "at"}
    _pubsub_table(t_env, "same_attribute", **same)
    assert (
        "ValidationException: Options 'attributes.record-id' and 'attributes.event-time' of "
        "connector 'gcp-pubsub' must differ, both are 'at'.\n"
    ) in planning_error(t_env, insert.format("same_attribute"))

    _pubsub_table(t_env, "bad_placeholder", topic="t-{regoin:x}")
    assert (
        "ValidationException: Unknown placeholder '{regoin:x}' in option 'topic' of connector "
        "'gcp-pubsub': 'regoin' is neither a column of the table (id, region) nor event_time "
        "or processing_time.\n"
    ) in planning_error(t_env, insert.format("bad_placeholder"))

    _pubsub_table(t_env, "bad_template", topic="t-{region")
    assert (
        "ValidationException: Invalid template in option 'topic' of connector 'gcp-pubsub': "
        "an unclosed '{' at position 2.\n"
    ) in planning_error(t_env, insert.format("bad_template"))

    _pubsub_table(t_env, "insert_only")
    assert (
        "Table sink 'default_catalog.default_database.insert_only' doesn't support consuming "
        "update changes which is produced by node GroupAggregate(groupBy=[region]"
    ) in planning_error(
        t_env,
        "INSERT INTO insert_only SELECT COUNT(*), region FROM (VALUES (1, 'eu')) AS v(id, region) "
        "GROUP BY region",
    )

    no_metrics = make_table_env(extra={"python.metric.enabled": "false"})
    _pubsub_table(no_metrics, "no_metrics")
    assert (
        "sink 'no_metrics': python.metric.enabled=false disables the pre-barrier flush hook"
    ) in planning_error(no_metrics, insert.format("no_metrics"))


JAVA_JOB = """
import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;

public class SqlJob {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.setString("python.executable", args[0]);
        conf.setString("restart-strategy.type", "none");
        conf.setString("parallelism.default", "2");
        TableEnvironment t = TableEnvironment.create(
                EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(conf).build());
        t.executeSql(args[1]);
        t.executeSql(args[2]).await();
    }
}
"""


@pytest.mark.skipif(shutil.which("javac", path=bridge_build.java_path()) is None, reason="no JDK")
def test_a_java_table_environment_without_python_client_writes_through_the_connector(
    project: str, tmp_path: Path
) -> None:
    """SQL from a Java program (as the SQL client runs it): only python.executable is set."""
    prefix = unique("java")
    make_topics(project, [f"{prefix}-{r}" for r in REGIONS])
    import pyflink

    root = Path(pyflink.__file__).parent
    classpath = [
        *map(str, sorted((root / "lib").glob("*.jar"))),
        *map(str, sorted((root / "opt").glob("flink-python-*.jar"))),
        str(bridge_build.build()),
    ]
    (tmp_path / "SqlJob.java").write_text(JAVA_JOB)
    javac = shutil.which("javac", path=bridge_build.java_path())
    java = shutil.which("java", path=bridge_build.java_path())
    assert javac and java
    cp = os.pathsep.join(classpath)
    subprocess.run(
        [javac, "-cp", cp, "-d", str(tmp_path), str(tmp_path / "SqlJob.java")], check=True
    )
    ddl = (
        "CREATE TABLE events (id BIGINT, region STRING) WITH ('connector' = 'gcp-pubsub', "
        f"'project' = '{project}', 'topic' = '{prefix}-{{region}}')"
    )
    insert = "INSERT INTO events VALUES " + ", ".join(
        f"({i}, '{REGIONS[i % 3]}')" for i in range(6)
    )
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "FLINK_LOG_DIR": str(tmp_path)}
    env.pop("_python_worker_execution_mode", None)
    done = subprocess.run(
        [java, "-cp", os.pathsep.join([str(tmp_path), cp]), "SqlJob", sys.executable, ddl, insert],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for i, region in enumerate(REGIONS):
        got = pull_all(project, f"{prefix}-{region}", expect=2)
        assert sorted(json.loads(m.data)["id"] for m in got) == [i, i + 3], region


def test_the_writer_flushes_at_checkpoints_while_the_job_runs(project: str) -> None:
    """With size and time thresholds out of reach, only a checkpoint (its marker, before the
    barrier) sends rows before the input ends: rows arriving while the job runs were flushed
    by one."""
    topic = unique("marked")
    make_topics(project, [topic])
    t_env = make_table_env(parallelism=1, checkpoint_ms=500)
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE source (id BIGINT) WITH ('connector' = 'datagen', "
        "'rows-per-second' = '40', 'number-of-rows' = '400', 'fields.id.kind' = 'sequence', "
        "'fields.id.start' = '1', 'fields.id.end' = '400')"
    )
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE marked (id BIGINT) WITH (
            'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{topic}',
            'sink.buffer-flush.max-rows' = '1000000', 'sink.buffer-flush.interval' = '1d')"""
    )
    result = t_env.execute_sql("INSERT INTO marked SELECT id FROM source")
    client = result.get_job_client()
    early = pull_all(project, topic, expect=1, timeout_s=8.0)
    status = client.get_job_status().result()
    assert early and status == JobStatus.RUNNING, (len(early), status)
    result.wait()
    rest = pull_all(project, topic, expect=400 - len(early))
    assert sorted(json.loads(m.data)["id"] for m in [*early, *rest]) == list(range(1, 401))


def test_a_checkpointed_job_whose_writer_worker_is_killed_loses_nothing(
    project: str, tmp_path: Path
) -> None:
    """The sink's Python worker (the job's only Python operator) is killed with SIGKILL after
    the first checkpoint flushed rows and completed; Flink restarts from the last checkpoint
    and replays."""
    topic = unique("killed")
    make_topics(project, [topic])
    rows = 600
    failover = Failover(tmp_path / "failover")
    t_env = failover_table_env(failover, rows, rows_per_second=60)
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE killed (id BIGINT) WITH (
            'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{topic}',
            'sink.buffer-flush.max-rows' = '1000000', 'sink.buffer-flush.interval' = '1d')"""
    )
    # Workers of an earlier job of the session may still be shutting down: not this job's.
    earlier = set(python_workers())
    result = t_env.execute_sql("INSERT INTO killed SELECT id FROM source")
    # Only a checkpoint sends rows before the input ends (thresholds out of reach).
    early = pull_all(project, topic, expect=1, timeout_s=30.0)
    assert early, "no checkpoint flushed rows"
    # Flushed in the checkpoint's snapshot, which completes a little later: the kill waits for
    # it, or the restart would legitimately start from scratch.
    wait_for(lambda: checkpoint_completed(failover.checkpoints), "a completed checkpoint")
    victim, replacement = kill_the_python_worker(earlier)
    assert result.get_job_client().get_job_status().result() != JobStatus.FAILED
    result.wait()
    failover.assert_restored()
    rest = pull_all(project, topic, expect=rows - len(early), timeout_s=60.0)
    ids = [json.loads(m.data)["id"] for m in [*early, *rest]]
    lost = set(range(1, rows + 1)) - set(ids)
    assert not lost, f"lost {len(lost)}"
    print(f"worker {victim} killed, {replacement} took over: 0 lost, {len(ids) - rows} duplicates")
