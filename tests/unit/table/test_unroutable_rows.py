"""Every SQL connector sends a row its ``table``/``topic``/``queue`` template names no destination
for to the failure handler, as an unroutable record (``destination='unresolved'``, the row's
JSON as payload), through the sink's own writer; the job goes on.

The sinks are built by the connectors' adapters; each writer runs in this process with a
dead-letter queue in memory in place of the Pub/Sub one, and is never opened, so a record that
reached a destination writer would fail the test.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from pyflink_gcp.core.errors import RecordRejectedError
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.table import bigquery, bigtable, cloudtasks, pubsub, spanner
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, TableInfo
from tests.support.dead_letters import MemoryDeadLetterQueue

TABLE = TableInfo(
    "events",
    (
        Column("id", {"root": "VARCHAR", "nullable": True, "sql": "STRING"}),
        Column("region", {"root": "VARCHAR", "nullable": True, "sql": "STRING"}),
    ),
)

#: connector: (its adapter module, its options with a template over ``region``).
CONNECTORS: dict[str, tuple[Any, dict[str, str]]] = {
    "gcp-pubsub": (pubsub, {"project": "p", "topic": "events-{region}"}),
    "gcp-bigquery": (bigquery, {"project": "p", "dataset": "d", "table": "events_{region}"}),
    "gcp-bigtable": (
        bigtable,
        {
            "project": "p",
            "instance": "inst",
            "table": "events_{region}",
            "row-key": "id",
            "column-family": "cf",
        },
    ),
    "gcp-cloudtasks": (
        cloudtasks,
        {"project": "p", "location": "l", "queue": "events-{region}", "url": "https://h/x"},
    ),
    "gcp-spanner": (
        spanner,
        {"project": "p", "instance": "inst", "database": "db", "table": "events_{region}"},
    ),
}


def _writer(connector: str, handler: FailureHandler | None = None, **options: str) -> SinkWriter:
    module, raw = CONNECTORS[connector]
    values = parse(connector, {**raw, **options}, TABLE.names)
    config = module.build_sink(values, TABLE)._sink_config()
    if handler is not None:  # in place of the Pub/Sub dead-letter queue of the options
        config = dataclasses.replace(config, failure_handler=handler)
    return SinkWriter(config)


@pytest.mark.parametrize("connector", CONNECTORS)
def test_a_row_whose_template_renders_no_name_is_dead_lettered_as_unresolved(
    connector: str,
) -> None:
    dlq = MemoryDeadLetterQueue()
    writer = _writer(connector, FailureHandler.send_to_dead_letter_queue(dlq))
    writer.write({"id": "k1", "region": None})
    writer.write({"id": "k2", "region": None})

    assert [f.destination for f in dlq.sent] == ["unresolved", "unresolved"]
    failed = dlq.sent[0]
    assert failed.sink == "events"
    assert json.loads(failed.payload) == {"id": "k1", "region": None}
    assert "placeholder {region}: the value is missing (None)" in failed.reason
    assert writer._router.dead_lettered == 2
    assert writer.records_written == 0


@pytest.mark.parametrize("connector", CONNECTORS)
def test_with_the_default_handler_such_a_row_fails_the_job_naming_it(connector: str) -> None:
    writer = _writer(connector)
    with pytest.raises(RecordRejectedError, match=r"destination 'unresolved' rejected record"):
        writer.write({"id": "k1", "region": None})


@pytest.mark.parametrize("connector", CONNECTORS)
def test_with_drop_such_a_row_is_dropped_and_counted(connector: str) -> None:
    writer = _writer(connector, None, **{"failure-handler": "drop"})
    writer.write({"id": "k1", "region": None})
    assert writer._router.dropped == 1
