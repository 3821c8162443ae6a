"""PubSubSerializationSchema: payload, ordering key and attributes, as (record, ctx) or (record)."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from pyflink_gcp.core import ConfigurationError, SerializerError, WriterContext
from pyflink_gcp.core.functions import RecordOnly
from pyflink_gcp.pubsub import PubSubSerializationSchema

CTX = WriterContext()
CTX.subtask_index = 3


def test_payload_only_gives_no_key_and_no_attributes():
    schema = PubSubSerializationSchema.payload(lambda r: r["body"])
    assert schema.serialize({"body": b"abc"}, CTX) == (b"abc", "", None)
    assert not schema.has_ordering_key


def test_one_argument_functions_are_adapted_once_when_the_schema_is_built():
    schema = (
        PubSubSerializationSchema.payload(lambda r: r["body"])
        .with_ordering_key(lambda r: r["key"])
        .with_attributes(lambda r: {"kind": r["kind"]})
    )
    assert isinstance(schema._payload, RecordOnly)
    assert isinstance(schema._ordering_key, RecordOnly)
    assert isinstance(schema._attributes, RecordOnly)
    assert schema.serialize({"body": b"x", "key": "k1", "kind": "order"}, CTX) == (
        b"x",
        "k1",
        {"kind": "order"},
    )


def test_two_argument_functions_receive_the_writer_context():
    seen = []

    def payload(record, ctx):
        seen.append(ctx)
        return b"p"

    schema = (
        PubSubSerializationSchema.payload(payload)
        .with_ordering_key(lambda r, ctx: f"{r}-{ctx.subtask_index}")
        .with_attributes(lambda r, ctx: {"subtask": str(ctx.subtask_index)})
    )
    assert schema._payload is payload
    assert schema.serialize(7, CTX) == (b"p", "7-3", {"subtask": "3"})
    assert seen == [CTX]


def test_mixed_shapes_in_one_schema():
    schema = (
        PubSubSerializationSchema.payload(lambda r, ctx: r.encode())
        .with_ordering_key(lambda r: r[0])
        .with_attributes(lambda r, ctx: {"len": str(len(r))})
    )
    assert schema.serialize("hello", CTX) == (b"hello", "h", {"len": "5"})


def test_payload_types_str_bytearray_and_memoryview_become_bytes():
    assert PubSubSerializationSchema.payload(lambda r: "é").serialize(0, CTX) == (
        "é".encode(),
        "",
        None,
    )
    assert PubSubSerializationSchema.payload(lambda r: bytearray(b"ab")).serialize(0, CTX)[0] == (
        b"ab"
    )
    assert PubSubSerializationSchema.payload(lambda r: memoryview(b"cd")).serialize(0, CTX)[0] == (
        b"cd"
    )


def test_payload_none_skips_the_record_before_key_and_attributes():
    calls = []
    schema = (
        PubSubSerializationSchema.payload(lambda r: None)
        .with_ordering_key(lambda r: calls.append("key"))
        .with_attributes(lambda r: calls.append("attributes"))
    )
    assert schema.serialize({"a": 1}, CTX) is None
    assert calls == []


def test_payload_of_another_type_names_the_function_and_the_record():
    def to_payload(record):
        return 42

    with pytest.raises(SerializerError) as err:
        PubSubSerializationSchema.payload(to_payload).serialize({"id": 1}, CTX)
    assert str(err.value) == (
        "payload function tests.unit.pubsub.test_serialization."
        "test_payload_of_another_type_names_the_function_and_the_record.<locals>.to_payload "
        "returned int for record {'id': 1}; expected bytes"
    )


def test_ordering_key_none_or_empty_sends_no_key_and_other_types_become_str():
    schema = PubSubSerializationSchema.payload(lambda r: b"x")
    assert schema.with_ordering_key(lambda r: None).serialize(0, CTX) == (b"x", "", None)
    assert schema.with_ordering_key(lambda r: "").serialize(0, CTX) == (b"x", "", None)
    assert schema.with_ordering_key(lambda r: 17).serialize(0, CTX) == (b"x", "17", None)


def test_with_methods_return_new_schemas_and_keep_the_other_functions():
    base = PubSubSerializationSchema.payload(lambda r: b"x")
    keyed = base.with_ordering_key(lambda r: "k")
    both = keyed.with_attributes(lambda r: {"a": "b"})
    assert base.serialize(0, CTX) == (b"x", "", None)
    assert keyed.serialize(0, CTX) == (b"x", "k", None)
    assert both.serialize(0, CTX) == (b"x", "k", {"a": "b"})
    assert keyed.has_ordering_key and both.has_ordering_key


def test_a_function_that_is_not_callable_is_a_configuration_error():
    with pytest.raises(ConfigurationError) as err:
        PubSubSerializationSchema.payload(b"not a function")
    assert str(err.value) == (
        "the payload function must be a callable (record, context) or (record), got bytes"
    )
    with pytest.raises(ConfigurationError, match="the ordering key function must be a callable"):
        PubSubSerializationSchema.payload(lambda r: b"").with_ordering_key("customer_id")


def test_repr_names_the_users_functions():
    def body(record):
        return b""

    def key(record, ctx):
        return ""

    schema = PubSubSerializationSchema.payload(body).with_ordering_key(key)
    prefix = "tests.unit.pubsub.test_serialization.test_repr_names_the_users_functions.<locals>"
    assert repr(schema) == (
        f"PubSubSerializationSchema.payload({prefix}.body).with_ordering_key({prefix}.key)"
    )


def test_the_schema_pickles_with_its_adapted_functions():
    schema = (
        PubSubSerializationSchema.payload(lambda r: str(r).encode())
        .with_ordering_key(lambda r, ctx: "k")
        .with_attributes(lambda r: {"n": str(r)})
    )
    copy = pickle.loads(cloudpickle.dumps(schema))
    assert copy.serialize(5, CTX) == (b"5", "k", {"n": "5"})


# -- provenance attributes --------------------------------------------------------------------


def at(timestamp: int | None) -> WriterContext:
    ctx = WriterContext()
    ctx._set_time(timestamp, None)
    return ctx


def test_the_event_time_attribute_is_the_flink_timestamp_in_epoch_millis():
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_event_time_attribute()
    assert schema.serialize(0, at(1_714_557_600_123)) == (
        b"x",
        "",
        {"event-time": "1714557600123"},
    )
    named = schema.with_attributes(lambda r: {"kind": "k"}).with_event_time_attribute("ts")
    assert named.serialize(0, at(5)) == (b"x", "", {"kind": "k", "ts": "5"})


def test_a_record_without_a_timestamp_gets_no_event_time_attribute():
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_event_time_attribute()
    assert schema.serialize(0, at(None)) == (b"x", "", None)
    assert schema.serialize(0, at(-(2**63))) == (b"x", "", None)  # Flink's "no timestamp"
    kept = schema.with_attributes(lambda r: {"kind": "k"})
    assert kept.serialize(0, at(None)) == (b"x", "", {"kind": "k"})


def test_a_record_id_from_a_key_function_is_set_by_the_schema_as_text():
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_record_id_attribute(
        key=lambda r: r["order"]
    )
    assert schema.record_id_digest is None  # the writer adds nothing
    assert schema.serialize({"order": 42}, CTX) == (b"x", "", {"record-id": "42"})
    custom = schema.with_record_id_attribute("id", key=lambda r, ctx: f"o-{r['order']}")
    assert custom.serialize({"order": 7}, CTX) == (b"x", "", {"id": "o-7"})


def test_a_record_id_without_a_key_is_left_to_the_writer_s_digest():
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_record_id_attribute()
    assert schema.record_id_digest == "record-id"
    assert schema.serialize(0, CTX) == (b"x", "", None)
    assert PubSubSerializationSchema.payload(lambda r: b"x").record_id_digest is None


@pytest.mark.parametrize("value", [None, ""])
def test_a_key_function_without_an_id_fails_naming_function_and_record(value):
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_record_id_attribute(
        key=lambda r: value
    )
    with pytest.raises(SerializerError, match=r"returned .* for record \{'id': 3\}; every record"):
        schema.serialize({"id": 3}, CTX)


def test_an_attributes_function_setting_a_provenance_name_fails_naming_both():
    schema = (
        PubSubSerializationSchema.payload(lambda r: b"x")
        .with_attributes(lambda r: {"event-time": "mine"})
        .with_event_time_attribute()
    )
    with pytest.raises(SerializerError) as err:
        schema.serialize(1, at(5))
    assert "returned attribute 'event-time', which the schema sets itself" in str(err.value)
    assert "for record 1; rename one of them" in str(err.value)


def test_provenance_attribute_names_are_checked_when_the_schema_is_built():
    schema = PubSubSerializationSchema.payload(lambda r: b"x")
    with pytest.raises(ConfigurationError, match="takes a non-empty attribute name"):
        schema.with_event_time_attribute("")
    with pytest.raises(ConfigurationError, match="over Pub/Sub's limit of 256 bytes"):
        schema.with_record_id_attribute("n" * 300)
    with pytest.raises(ConfigurationError, match="already names the event-time attribute"):
        schema.with_event_time_attribute("t").with_record_id_attribute("t")


def test_provenance_survives_the_other_with_methods_repr_and_pickling():
    def key(record):
        return record

    schema = (
        PubSubSerializationSchema.payload(lambda r: str(r).encode())
        .with_event_time_attribute()
        .with_record_id_attribute(key=key)
        .with_attributes(lambda r: {"n": str(r)})
    )
    assert schema.serialize(5, at(9)) == (
        b"5",
        "",
        {"n": "5", "event-time": "9", "record-id": "5"},
    )
    assert repr(schema).endswith(
        ".with_event_time_attribute('event-time').with_record_id_attribute('record-id', "
        "key=tests.unit.pubsub.test_serialization."
        "test_provenance_survives_the_other_with_methods_repr_and_pickling.<locals>.key)"
    )
    copy = pickle.loads(cloudpickle.dumps(schema))
    assert copy.serialize(6, at(10)) == (b"6", "", {"n": "6", "event-time": "10", "record-id": "6"})
