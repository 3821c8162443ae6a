"""PubSubSinkBuilder: what reaches the built configuration, and what is refused at build()."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pyflink_gcp.core import ConfigurationError, FailureHandler, WriterContext
from pyflink_gcp.core.options import CreateDisposition as CoreCreateDisposition
from pyflink_gcp.pubsub import (
    CreateDisposition,
    PubSubDeadLetterQueue,
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicCreateOptions,
    TopicDestination,
)


def resolver(record, ctx):
    return TopicDestination.of("p", "t")


def builder():
    return PubSubSink.builder().set_destination_resolver(resolver).set_serializer(lambda r: b"x")


def test_the_create_disposition_is_the_core_enum():
    assert CreateDisposition is CoreCreateDisposition


def test_defaults_reach_the_configuration():
    config = builder().build()._sink_config()
    factory = config.factory
    assert config.sink_name == "pubsub-sink"
    assert config.max_buffered_records == 20_000
    assert config.max_buffer_time_ms == 1_000
    assert config.idle_timeout_s == 15 * 60.0
    assert config.max_active is None
    assert config.per_destination_metrics is False
    assert factory.writer_options == PubSubWriterOptions()
    assert factory.publisher_options == PubSubPublisherOptions()
    assert factory.create_disposition is CreateDisposition.CREATE_NEVER
    assert factory.create_options == TopicCreateOptions()
    assert factory.retry.deadline_s == 120.0


def test_every_setter_reaches_the_built_configuration():
    writer = (
        PubSubWriterOptions.builder()
        .max_buffer_time(timedelta(milliseconds=250))
        .max_buffered_records(500)
        .retry_deadline(timedelta(seconds=9))
        .max_in_flight_requests(2)
        .per_destination_metrics(True)
        .idle_timeout(timedelta(minutes=2))
        .max_active_destinations(7)
        .max_created_destinations(3)
        .shutdown_budget(timedelta(seconds=4))
        .build()
    )
    publisher = (
        PubSubPublisherOptions.builder()
        .max_messages(10)
        .max_bytes(2_000)
        .enable_message_ordering(True)
        .build()
    )
    create = TopicCreateOptions(labels={"team": "data"})
    dlq = PubSubDeadLetterQueue.of(TopicDestination.of("p", "dlq"))
    sink = (
        builder()
        .set_sink_name("events")
        .set_endpoint("http://localhost:8085")
        .set_writer_options(writer)
        .set_publisher_options(publisher)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_topic_create_options(create)
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(dlq))
        .set_chain_with_upstream(False)
        .set_checkpoint_markers(False)
        .build()
    )
    config = sink._sink_config()
    factory = config.factory
    assert (config.sink_name, factory.sink) == ("events", "events")
    assert config.max_buffer_time_ms == 250
    assert config.max_buffered_records == 500
    assert config.per_destination_metrics is True
    assert config.idle_timeout_s == 120.0
    assert config.max_active == 7
    assert config.chain_with_upstream is False and config.checkpoint_markers is False
    assert config.failure_handler.dead_letter_queue is dlq
    assert factory.writer_options is writer
    assert factory.publisher_options is publisher
    assert factory.create_disposition is CreateDisposition.CREATE_IF_NEEDED
    assert factory.create_options is create
    assert factory.endpoint == "http://localhost:8085"
    assert factory.retry.deadline_s == 9.0
    assert factory.resolver_name == "tests.unit.pubsub.test_sink.resolver"


def test_topic_create_options_under_create_never_name_the_setter_to_use():
    with pytest.raises(ConfigurationError) as err:
        builder().set_topic_create_options(TopicCreateOptions(labels={"a": "b"})).build()
    assert str(err.value) == (
        "sink 'pubsub-sink': set_topic_create_options() applies only to topics the sink "
        "creates; call set_create_disposition(CreateDisposition.CREATE_IF_NEEDED) too"
    )


def test_create_if_needed_without_create_options_uses_the_defaults():
    sink = builder().set_create_disposition(CreateDisposition.CREATE_IF_NEEDED).build()
    assert sink._sink_config().factory.create_options == TopicCreateOptions()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda b: b.set_writer_options(PubSubPublisherOptions()),
            "sink 'pubsub-sink': set_writer_options() takes PubSubWriterOptions "
            "(PubSubWriterOptions.builder()...build()), got PubSubPublisherOptions",
        ),
        (
            lambda b: b.set_publisher_options(PubSubWriterOptions()),
            "sink 'pubsub-sink': set_publisher_options() takes PubSubPublisherOptions "
            "(PubSubPublisherOptions.builder()...build()), got PubSubWriterOptions",
        ),
        (
            lambda b: b.set_topic_create_options({"labels": {}}),
            "sink 'pubsub-sink': set_topic_create_options() takes TopicCreateOptions, got dict",
        ),
        (
            lambda b: b.set_create_disposition("CREATE_IF_NEEDED"),
            "sink 'pubsub-sink': set_create_disposition() takes CreateDisposition.CREATE_NEVER "
            "or CREATE_IF_NEEDED, got 'CREATE_IF_NEEDED'",
        ),
    ],
)
def test_setters_refuse_values_of_the_wrong_type(call, message):
    with pytest.raises(ConfigurationError) as err:
        call(builder())
    assert str(err.value) == message


def test_ordering_keys_without_message_ordering_are_refused():
    schema = PubSubSerializationSchema.payload(lambda r: b"x").with_ordering_key(lambda r: "k")
    with pytest.raises(ConfigurationError) as err:
        builder().set_serializer(schema).build()
    assert str(err.value) == (
        "sink 'pubsub-sink': the serializer sets ordering keys but message ordering is "
        "disabled; call PubSubPublisherOptions.builder().enable_message_ordering(True)"
    )
    ordered = PubSubPublisherOptions.builder().enable_message_ordering(True).build()
    builder().set_serializer(schema).set_publisher_options(ordered).build()


@pytest.mark.parametrize(
    "serializer",
    [lambda r: f"{r}".encode(), lambda r, ctx: f"{r}".encode()],
    ids=["record", "record-ctx"],
)
def test_a_callable_serializer_becomes_a_payload_schema(serializer):
    config = builder().set_serializer(serializer).build()._sink_config()
    assert isinstance(config.serializer, PubSubSerializationSchema)
    assert config.serializer.serialize(5, WriterContext()) == (b"5", "", None)


def test_a_serializer_that_is_neither_schema_nor_callable_is_refused():
    with pytest.raises(ConfigurationError) as err:
        builder().set_serializer(b"payload").build()
    assert str(err.value) == (
        "sink 'pubsub-sink': the serializer must be a PubSubSerializationSchema or a callable "
        "(record, ctx) -> bytes, got bytes"
    )


def test_a_serializer_is_required():
    with pytest.raises(ConfigurationError) as err:
        PubSubSink.builder().set_destination_resolver(resolver).build()
    assert str(err.value) == (
        "sink 'pubsub-sink': set_serializer() is required, e.g. "
        "PubSubSerializationSchema.payload(fn)"
    )


def test_help_shows_the_sinks_own_documentation() -> None:
    """help() must not show PyFlink's inherited "java Sink object" constructor text."""
    import pydoc

    from pyflink_gcp.pubsub import PubSubSink

    text = pydoc.render_doc(PubSubSink, renderer=pydoc.plaintext)
    assert "java Sink object" not in text
    assert (PubSubSink.__doc__ or "").split("\n", 1)[0] in text
    assert "PubSubSink.builder()...build()" in text


def test_a_digest_record_id_reaches_the_writer_factory_and_a_keyed_one_does_not():
    schema = PubSubSerializationSchema.payload(lambda r: b"x")
    assert builder().build()._sink_config().factory.record_id_digest is None
    digest = builder().set_serializer(schema.with_record_id_attribute("rid")).build()
    assert digest._sink_config().factory.record_id_digest == "rid"
    keyed = builder().set_serializer(schema.with_record_id_attribute(key=lambda r: r)).build()
    assert keyed._sink_config().factory.record_id_digest is None
