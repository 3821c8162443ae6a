"""A row whose destination template renders no name goes to the failure handler, in every SQL
connector: a MiniCluster job writes rows through a ``gcp-<service>`` table whose template uses a
column (``events_{region}``), some rows with a NULL ``region``, under ``'failure-handler' =
'dead-letter'``. The job finishes, the other rows are in the emulator, and each NULL row is in the
dead-letter topic as its JSON with ``dlq-destination=unresolved``.

One job (a statement set of one ``INSERT`` per connector, each with its own dead-letter topic)
writes through all five tables, sparing four job start-ups; each connector's case then checks
its own table and topic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.bigquery.support import make_dataset
from tests.integration.bigquery.support import query as bigquery_query
from tests.integration.bigtable.support import read_table
from tests.integration.bigtable.support import unique as bigtable_unique
from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    suffix,
    wait_for_dispatches,
)
from tests.integration.spanner.support import create_tables
from tests.integration.spanner.support import query as spanner_query
from tests.integration.spanner.support import unique as spanner_unique
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.tables import make_table_env

pytestmark = pytest.mark.e2e

REGIONS = ("eu", "us")
#: (id, region): every other row has no region, so its template renders no name.
ROWS = [(1, "eu"), (2, None), (3, "us"), (4, None), (5, "eu")]
ROUTED = [(i, r) for i, r in ROWS if r is not None]
UNROUTED = [i for i, r in ROWS if r is None]
VALUES = ", ".join(f"({i}, {'CAST(NULL AS STRING)' if r is None else repr(r)})" for i, r in ROWS)

#: What a connector's test needs: the table's options and a check of the routed rows.
Setup = tuple[dict[str, str], Callable[[], None]]


def _ids(region: str) -> list[int]:
    return [i for i, r in ROUTED if r == region]


def _pubsub(stack: Any) -> Setup:
    prefix = unique("unroutable")
    make_topics(stack.project, [f"{prefix}-{r}" for r in REGIONS])

    def check() -> None:
        for region in REGIONS:
            pulled = pull_all(stack.project, f"{prefix}-{region}", expect=len(_ids(region)))
            assert sorted(json.loads(m.data)["id"] for m in pulled) == _ids(region), region

    return {"project": stack.project, "topic": prefix + "-{region}"}, check


def _bigquery(stack: Any) -> Setup:
    dataset = make_dataset(stack.project, "unroutable")

    def check() -> None:
        for region in REGIONS:
            rows = bigquery_query(
                stack.project, f"SELECT id FROM `{stack.project}.{dataset}.events_{region}`"
            )
            assert sorted(row["id"] for row in rows) == _ids(region), region

    return {"project": stack.project, "dataset": dataset, "table": "events_{region}"}, check


def _bigtable(stack: Any) -> Setup:
    instance = bigtable_unique("unroutable-")

    def check() -> None:
        for region in REGIONS:
            keys = sorted(int(key) for key in read_table(instance, f"events_{region}"))
            assert keys == _ids(region), region

    options = {
        "project": stack.project,
        "instance": instance,
        "table": "events_{region}",
        "row-key": "id",
        "column-family": "cf",
        "create-disposition": "create-if-needed",
    }
    return options, check


def _cloudtasks(stack: Any) -> Setup:
    run = suffix()
    create_queues(stack, [f"unroutable-{run}-{r}" for r in REGIONS])

    def check() -> None:
        got = wait_for_dispatches(stack, f"/unroutable/{run}/", len(ROUTED))
        assert sorted(r["path"] for r in got) == sorted(f"/unroutable/{run}/{i}" for i, _ in ROUTED)

    options = {
        "project": stack.project,
        "location": LOCATION,
        "queue": f"unroutable-{run}-{{region}}",
        "url": f"{stack.receiver_url}/unroutable/{run}/{{id}}",
    }
    return options, check


def _spanner(stack: Any) -> Setup:
    prefix = spanner_unique("unroutable")
    create_tables(
        [
            f"CREATE TABLE {prefix}_{r} (id INT64 NOT NULL, region STRING(MAX)) PRIMARY KEY (id)"
            for r in REGIONS
        ]
    )

    def check() -> None:
        for region in REGIONS:
            rows = spanner_query(f"SELECT id FROM {prefix}_{region} ORDER BY id")
            assert [row[0] for row in rows] == _ids(region), region

    options = {
        "project": stack.project,
        "instance": os.environ["SPANNER_INSTANCE"],
        "database": os.environ["SPANNER_DATABASE"],
        "table": prefix + "_{region}",
    }
    return options, check


CONNECTORS: dict[str, Callable[[Any], Setup]] = {
    "gcp-pubsub": _pubsub,
    "gcp-bigquery": _bigquery,
    "gcp-bigtable": _bigtable,
    "gcp-cloudtasks": _cloudtasks,
    "gcp-spanner": _spanner,
}


@pytest.fixture(scope="module")
def written(stack: Any) -> dict[str, tuple[Callable[[], None], str]]:
    """Runs the one job writing :data:`ROWS` through a table of every connector; by connector,
    the check of its routed rows and its dead-letter topic."""
    t_env = make_table_env(parallelism=1)
    statements = t_env.create_statement_set()
    prepared: dict[str, tuple[Callable[[], None], str]] = {}
    for n, (connector, setup) in enumerate(CONNECTORS.items()):
        options, check = setup(stack)
        dead_letters = unique("unroutable-dlq")
        make_topics(stack.project, [dead_letters])
        options = {
            "connector": connector,
            **options,
            "failure-handler": "dead-letter",
            "dead-letter.topic": f"projects/{stack.project}/topics/{dead_letters}",
        }
        listed = ", ".join(f"'{key}' = '{value}'" for key, value in options.items())
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE events_{n} (id BIGINT, region STRING) WITH ({listed})"
        )
        statements.add_insert_sql(f"INSERT INTO events_{n} VALUES {VALUES}")
        prepared[connector] = (check, dead_letters)
    statements.execute().wait()
    return prepared


@pytest.mark.parametrize("connector", CONNECTORS)
def test_rows_with_a_null_template_column_are_dead_lettered_as_unresolved(
    stack: Any, written: dict[str, tuple[Callable[[], None], str]], connector: str
) -> None:
    check, dead_letters = written[connector]
    check()
    letters = pull_all(stack.project, dead_letters, expect=len(UNROUTED))
    assert sorted(json.loads(m.data)["id"] for m in letters) == UNROUTED
    for message in letters:
        assert json.loads(message.data)["region"] is None
        assert message.attributes["dlq-destination"] == "unresolved"
        assert (
            "placeholder {region}: the value is missing (None)"
            in (message.attributes["dlq-reason"])
        )
