"""gcp-pubsub's adapter: messages, attributes and ordering keys from columns, topics from the
template."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, time
from decimal import Decimal
from types import SimpleNamespace

import pytest

from pyflink_gcp.core.errors import RecordRejectedError
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.table.option_model import OptionError
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.pubsub import build_sink, row_json
from pyflink_gcp.table.rows import Column, TableInfo

TABLE = TableInfo(
    "events",
    tuple(Column(n, {"root": "VARCHAR"}) for n in ("id", "region", "body", "labels", "customer")),
)


def _serializer_and_resolver(**options: str):
    values = parse("gcp-pubsub", {"project": "p", "topic": "ev-{region}", **options}, TABLE.names)
    config = build_sink(values, TABLE)._sink_config()
    return config.serializer, config.resolver


def test_json_renders_every_sql_value_form():
    record = {
        "d": Decimal("12.50"),
        "ts": datetime(2024, 3, 1, 12, 0, 0, 123456),
        "ltz": datetime(2024, 3, 1, 12, 0, tzinfo=UTC),
        "day": date(2024, 3, 1),
        "t": time(12, 30, 0, 123000),
        "b": b"\x00\xff",
        "nested": {"x": [1, None], "m": {"k": "é"}},
        "nan": float("nan"),
    }
    assert row_json(record).decode() == (
        '{"d":"12.50","ts":"2024-03-01T12:00:00.123456","ltz":"2024-03-01T12:00:00Z",'
        '"day":"2024-03-01","t":"12:30:00.123000","b":"AP8=","nested":{"x":[1,null],'
        '"m":{"k":"é"}},"nan":NaN}'
    )


def test_the_default_message_is_the_row_as_json_to_the_templates_topic():
    serializer, resolver = _serializer_and_resolver(**{"name.sanitize": "true"})
    record = {"id": 1, "region": "eu/west", "body": None, "labels": None, "customer": "c1"}
    assert serializer.serialize(record, None) == (row_json(record), "", None)
    # name.sanitize turns what a topic id cannot hold into its separator.
    assert str(resolver.resolve(record, None)) == "projects/p/topics/ev-eu_west"


def test_without_name_sanitize_a_value_a_topic_id_cannot_hold_makes_the_row_unroutable():
    _, resolver = _serializer_and_resolver()
    record = {"id": 1, "region": "eu/west", "body": None, "labels": None, "customer": "c1"}
    unroutable = resolver.resolve(record, None)
    assert isinstance(unroutable, UnroutableRecord)
    assert unroutable.payload == row_json(record)
    assert "placeholder {region} is 'eu/west': '/' is not allowed; a Pub/Sub topic id" in (
        unroutable.reason
    )


def test_raw_payload_attributes_and_ordering_key_come_from_columns():
    serializer, _ = _serializer_and_resolver(
        **{
            "payload.format": "raw",
            "payload.column": "body",
            "attributes.columns": "id,region",
            "attributes.map-column": "labels",
            "ordering-key.column": "customer",
        }
    )
    record = {
        "id": 7,
        "region": "eu",
        "body": b"raw",
        "labels": {"k": "v", "n": None},
        "customer": 3,
    }
    assert serializer.serialize(record, None) == (
        b"raw",
        "3",
        {"k": "v", "id": "7", "region": "eu"},
    )
    # A NULL payload skips the row.
    assert serializer.serialize({**record, "body": None}, None) is None


def test_a_row_whose_template_renders_no_topic_goes_to_the_failure_handler():
    values = parse("gcp-pubsub", {"project": "p", "topic": "ev-{region}"}, TABLE.names)
    writer = SinkWriter(build_sink(values, TABLE)._sink_config())
    # The default handler fails the job, naming the unresolved destination and the reason, and
    # how a SQL table lets the job go on: its option, not the DataStream API.
    with pytest.raises(RecordRejectedError) as rejected:
        writer.write({"id": 1, "region": None, "body": None, "labels": None, "customer": None})
    assert re.search(r"destination 'unresolved' rejected .*\{region\}", str(rejected.value))
    assert str(rejected.value).endswith(
        "('failure-handler' = 'fail', the default). A restart replays this row: fix its cause, "
        "or let the job go on past such rows with 'failure-handler' = 'drop' or 'dead-letter' "
        "(with 'dead-letter.topic')"
    )
    assert "FailureHandler" not in str(rejected.value)


def test_ordering_is_on_exactly_when_an_ordering_key_column_is_set():
    for options, ordered in (({}, False), ({"ordering-key.column": "customer"}, True)):
        values = parse("gcp-pubsub", {"project": "p", "topic": "t1t", **options}, TABLE.names)
        factory = build_sink(values, TABLE)._sink_config().factory
        assert factory.publisher_options.enable_message_ordering is ordered
    assert json.loads(row_json({"a": 1})) == {"a": 1}


def test_provenance_options_add_the_event_time_and_the_digest_record_id_attributes():
    options = {"attributes.event-time": "ts", "attributes.record-id": "rid"}
    values = parse("gcp-pubsub", {"project": "p", "topic": "t1t", **options}, TABLE.names)
    config = build_sink(values, TABLE)._sink_config()
    record = {"id": 1, "region": "eu", "body": None, "labels": None, "customer": None}
    ctx = SimpleNamespace(timestamp=1714557600000)
    # The event time is the schema's; the digest, which covers the topic, the writer's.
    assert config.serializer.serialize(record, ctx) == (
        row_json(record),
        "",
        {"ts": "1714557600000"},
    )
    assert config.factory.record_id_digest == "rid"
    # A row without a rowtime is sent without the event-time attribute.
    assert config.serializer.serialize(record, SimpleNamespace(timestamp=None))[2] is None
    # Unset, neither is sent.
    plain = build_sink(parse("gcp-pubsub", {"project": "p", "topic": "t1t"}, TABLE.names), TABLE)
    assert plain._sink_config().factory.record_id_digest is None
    assert plain._sink_config().serializer.serialize(record, ctx)[2] is None


def test_provenance_attribute_names_are_checked_against_pubsubs_key_limit():
    for key in ("attributes.event-time", "attributes.record-id"):
        for bad in ("", "k" * 257):
            with pytest.raises(OptionError) as error:
                parse("gcp-pubsub", {"project": "p", "topic": "t", key: bad}, TABLE.names)
            assert str(error.value) == (
                f"Invalid value for option '{key}' of connector 'gcp-pubsub': expected a text "
                f"of 1 to 256 bytes, got '{bad}'."
            )
    # The two must differ (the DataStream schema refuses one attribute for both, too).
    same = {"attributes.event-time": "at", "attributes.record-id": "at"}
    with pytest.raises(OptionError) as error:
        parse("gcp-pubsub", {"project": "p", "topic": "t1t", **same}, TABLE.names)
    assert str(error.value) == (
        "Options 'attributes.record-id' and 'attributes.event-time' of connector 'gcp-pubsub' "
        "must differ, both are 'at'."
    )
    # Either alone may take the other's default name.
    for key in ("attributes.event-time", "attributes.record-id"):
        parse("gcp-pubsub", {"project": "p", "topic": "t1t", key: "record-id"}, TABLE.names)
