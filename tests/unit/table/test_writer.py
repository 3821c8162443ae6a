"""create_writer: the payload's target, from DDL options to the DataStream writer function."""

from __future__ import annotations

import json

import pytest
from pyflink.common import Row

from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER, ConfigurationError
from pyflink_gcp.pubsub.sink import PubSubSink
from pyflink_gcp.table import create_writer
from pyflink_gcp.table.writer import TableWriterProcessFunction, UnbuildableWriter

SCHEMA = json.dumps(
    {
        "sink_name": "events",
        "columns": [
            {"name": "id", "type": {"root": "BIGINT", "nullable": True, "sql": "BIGINT"}},
            {"name": "region", "type": {"root": "VARCHAR", "nullable": True, "sql": "STRING"}},
        ],
    }
)


def test_the_writer_is_the_datastream_sinks_writer_converting_rows():
    writer = create_writer("gcp-pubsub", {"project": "p", "topic": "t-{region}"}, SCHEMA)
    assert isinstance(writer, TableWriterProcessFunction)
    config = writer._config
    assert config.sink_name == "events"
    assert type(config.factory).__name__ == "PubSubWriterFactory"
    assert config.max_buffered_records == 20_000 and config.max_buffer_time_ms == 1_000
    record = writer._convert(Row(id=1, region="eu"))
    assert record == {"id": 1, "region": "eu"}
    assert str(config.resolver.resolve(record, None)) == "projects/p/topics/t-eu"
    assert isinstance(PubSubSink(config), PubSubSink)


def test_options_map_onto_the_builders_shared_names():
    writer = create_writer(
        "gcp-pubsub",
        {
            "project": "p",
            "topic": "events",
            "sink.buffer-flush.max-rows": "50",
            "sink.buffer-flush.interval": "250ms",
            "sink.idle-timeout": "1min",
            "sink.max-active-destinations": "7",
            "failure-handler": "drop",
        },
        SCHEMA,
    )
    assert isinstance(writer, TableWriterProcessFunction)
    config = writer._config
    assert (config.max_buffered_records, config.max_buffer_time_ms) == (50, 250)
    assert (config.idle_timeout_s, config.max_active) == (60.0, 7)
    assert config.failure_handler.mode == "log_and_drop"


def test_an_unbuildable_writer_fails_once_from_open_marked_non_retriable():
    writer = create_writer("gcp-pubsub", {"project": "p", "topic": "{nope}"}, SCHEMA)
    assert isinstance(writer, UnbuildableWriter)
    with pytest.raises(ConfigurationError, match=r"unknown placeholder \{nope\}") as error:
        writer.open(None)
    assert NON_RETRIABLE_MARKER in "".join(getattr(error.value, "__notes__", []))
    bad = create_writer(
        "gcp-pubsub", {"project": "p", "topic": "t", "sink.idle-timeout": "x"}, SCHEMA
    )
    with pytest.raises(ConfigurationError, match=r"^sink 'events': Invalid value for option"):
        bad.open(None)


def test_a_table_with_a_primary_key_writes_upserts_and_deletes_and_drops_update_before():
    from pyflink.common.types import RowKind

    from pyflink_gcp.table.rows import DeletedRow

    keyed = json.loads(SCHEMA)
    keyed["primary_key"] = ["id"]
    writer = create_writer(
        "gcp-bigquery", {"project": "p", "dataset": "d", "table": "t"}, json.dumps(keyed)
    )
    assert isinstance(writer, TableWriterProcessFunction)
    written: list = []
    writer._write = lambda record, ctx: written.append(record)  # type: ignore[method-assign]
    for kind in (RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE):
        row = Row(id=1, region=kind.name)
        row.set_row_kind(kind)
        writer.process_element(row, None)
    assert written == [
        {"id": 1, "region": "INSERT"},
        {"id": 1, "region": "UPDATE_AFTER"},
        {"id": 1, "region": "DELETE"},
    ]
    assert [type(r) for r in written] == [dict, dict, DeletedRow]
    assert writer._config.factory.options is not None


def test_carrying_options_map_onto_the_writers_carry_settings():
    writer = create_writer(
        "gcp-pubsub",
        {
            "project": "p",
            "topic": "events",
            "sink.max-carry-time": "30s",
            "sink.max-carried-rows": "9",
        },
        SCHEMA,
    )
    assert isinstance(writer, TableWriterProcessFunction)
    carry = writer._config.carry
    assert (carry.enabled, carry.max_carry_time_s, carry.max_carried_records) == (True, 30.0, 9)
    default = create_writer("gcp-pubsub", {"project": "p", "topic": "events"}, SCHEMA)
    assert isinstance(default, TableWriterProcessFunction)
    assert not default._config.carry.enabled


@pytest.mark.parametrize(
    ("options", "primary_key", "why"),
    [
        ({}, ["id"], "on a table with a PRIMARY KEY: the carried records are operator state"),
        ({"write-method": "buffered-stream"}, [], "with BufferedBigQueryWriterFactory: an exact"),
        (
            {"write-method": "file-loads", "file-loads.staging-location": "gs://b/p"},
            [],
            "with FileLoadsWriterFactory: an exactly-once",
        ),
    ],
)
def test_carrying_is_refused_where_the_datastream_sink_refuses_it(options, primary_key, why):
    """The Java factory refuses these at planning; a payload that got past it fails from
    ``open()``, once, with the DataStream sink's message."""
    schema = {**json.loads(SCHEMA), "primary_key": primary_key}
    values = {"project": "p", "dataset": "d", "table": "t", "sink.max-carry-time": "30s"}
    writer = create_writer("gcp-bigquery", {**values, **options}, json.dumps(schema))
    assert isinstance(writer, UnbuildableWriter)
    with pytest.raises(
        ConfigurationError, match=rf"^sink 'events': max_carry_time is not available {why}"
    ):
        writer.open(None)


def test_the_committer_is_built_from_the_same_options_as_the_writer():
    from pyflink_gcp.core.commit_operator import CommitterProcessFunction
    from pyflink_gcp.table import create_committer

    raw = {"project": "p", "dataset": "d", "table": "t", "write-method": "buffered-stream"}
    committer = create_committer("gcp-bigquery", raw, SCHEMA)
    assert isinstance(committer, CommitterProcessFunction)
    assert type(committer._config.factory).__name__ == "BufferedBigQueryWriterFactory"
    bad = create_committer("gcp-bigquery", {**raw, "write-method": "file-loads"}, SCHEMA)
    with pytest.raises(ConfigurationError, match="'file-loads.staging-location' .* is required"):
        bad.open(None)
