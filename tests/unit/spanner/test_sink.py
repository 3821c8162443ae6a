"""The Spanner sink builder, and the core's writer driving the Spanner writer it builds."""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta
from typing import Any

import cloudpickle
import pytest

from pyflink_gcp.core import (
    ConfigurationError,
    FailureHandler,
    RecordRejectedError,
    SerializerError,
    SubtaskInfo,
)
from pyflink_gcp.core.functions import RecordOnly
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.spanner import Mutation, SpannerSink, SpannerSinkBuilder, SpannerWriterOptions
from tests.unit.spanner.fakes import DB, FakeApi, event, ids, reject_kind, schema


def builder() -> SpannerSinkBuilder:
    return SpannerSink.builder().set_database(DB).set_serializer(lambda r, c: None)


def test_builder_requires_database_and_serializer() -> None:
    with pytest.raises(ConfigurationError, match="set_database"):
        SpannerSink.builder().set_serializer(lambda r, c: None).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        SpannerSink.builder().set_database(DB).build()
    with pytest.raises(ConfigurationError, match="DatabaseDestination.of"):
        SpannerSink.builder().set_database("projects/p/instances/i/databases/d")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="takes SpannerWriterOptions"):
        SpannerSink.builder().set_writer_options({"max": 1})


def test_a_resolver_is_refused_at_build_naming_set_database() -> None:
    b = builder().set_destination_resolver(lambda r, c: DB)  # accepted here, like every setter
    with pytest.raises(ConfigurationError, match=r"no destination resolver; use set_database\(\)"):
        b.build()


def test_builder_rejects_serializers_that_cannot_travel() -> None:
    lock = threading.Lock()
    with pytest.raises(ConfigurationError, match="not picklable.*'lock'"):
        SpannerSink.builder().set_database(DB).set_serializer(lambda r, c: lock and None).build()
    with pytest.raises(ConfigurationError, match="serializer must be a callable"):
        SpannerSink.builder().set_database(DB).set_serializer("Events").build()


#: Every public setter of the builder, a value, and where the built sink shows it.
SETTERS: list[tuple[str, Any, Any]] = [
    ("set_sink_name", "events-to-spanner", lambda s: s._sink_config().sink_name),
    ("set_database", DB, lambda s: (s.database, s._sink_config().fixed_destination)),
    ("set_endpoint", "http://localhost:9010", lambda s: s.writer_factory.endpoint),
    (
        "set_failure_handler",
        FailureHandler.log_and_drop(),
        lambda s: (s._sink_config().failure_handler.mode, s.writer_factory.fail_fast),
    ),
    ("set_chain_with_upstream", False, lambda s: s._sink_config().chain_with_upstream),
    ("set_checkpoint_markers", False, lambda s: s._sink_config().checkpoint_markers),
    (
        "set_writer_options",
        SpannerWriterOptions.builder()
        .max_buffer_time(timedelta(milliseconds=500))
        .max_buffered_records(7)
        .per_destination_metrics()
        .max_in_flight_requests(3)
        .build(),
        lambda s: (
            s._sink_config().max_buffer_time_ms,
            s._sink_config().max_buffered_records,
            s._sink_config().per_destination_metrics,
            s.writer_factory.options.max_in_flight_requests,
        ),
    ),
]


@pytest.mark.parametrize(("setter", "value", "seen"), SETTERS, ids=[s[0] for s in SETTERS])
def test_every_setter_reaches_the_built_sink(setter: str, value: Any, seen: Any) -> None:
    default = seen(builder().build())
    sink = getattr(builder(), setter)(value).build()
    assert seen(sink) != default or setter == "set_database"
    expected = {
        "set_sink_name": "events-to-spanner",
        "set_database": (DB, DB),
        "set_endpoint": "http://localhost:9010",
        "set_failure_handler": ("log_and_drop", False),
        "set_chain_with_upstream": False,
        "set_checkpoint_markers": False,
        "set_writer_options": (500, 7, True, 3),
    }[setter]
    assert seen(sink) == expected


def test_sink_config_has_a_fixed_database_and_no_per_destination_lifetimes() -> None:
    sink = builder().build()
    config = sink._sink_config()
    assert config.resolver is None and config.fixed_destination == DB
    assert config.idle_timeout_s is None and config.max_active is None
    assert config.max_buffered_records == 100_000 and config.max_buffer_time_ms == 1_000
    assert sink.writer_factory.fail_fast is True
    assert pickle.loads(cloudpickle.dumps(config)).factory.database == DB


def one_arg(record: dict[str, Any]) -> Mutation | None:
    return None if record.get("skip") else event(record["id"])


class ToEvent:
    def serialize(self, record: int, context: Any) -> Mutation:
        return event(record)


def test_serializers_are_adapted_once_at_build() -> None:
    assert isinstance(
        builder().set_serializer(one_arg).build()._sink_config().serializer, RecordOnly
    )

    def two(record: Any, context: Any) -> None:
        return None

    assert builder().set_serializer(two).build()._sink_config().serializer is two
    obj = ToEvent()
    assert builder().set_serializer(obj).build()._sink_config().serializer is obj


def connect_on_open(config: Any, api: FakeApi) -> None:
    """Open the built factory on ``api`` instead of a real client."""
    factory = config.factory

    def opened(info: SubtaskInfo) -> None:
        factory.connect(api)
        factory.schema = schema()

    factory.open = opened


def test_core_writer_drives_the_spanner_writer() -> None:
    sink = SpannerSink.builder().set_database(DB).set_serializer(one_arg).build()
    config = sink._sink_config()
    api = FakeApi(reject_kind("bad"))
    connect_on_open(config, api)
    core = SinkWriter(config)
    core.open(SubtaskInfo("spanner-sink"))
    core.write({"id": 1})
    core.write({"id": 2, "skip": True})
    core.flush()
    assert ids(api) == [1] and core.skipped == 1
    core.write({"id": 3, "kind": "x"})  # the one-argument serializer was adapted
    core.flush()
    assert ids(api) == [1, 3]

    bad = SpannerSink.builder().set_database(DB).set_serializer(lambda r, c: "text").build()
    bad_config = bad._sink_config()
    connect_on_open(bad_config, FakeApi())
    core = SinkWriter(bad_config)
    core.open(SubtaskInfo("spanner-sink"))
    with pytest.raises(SerializerError, match="sink 'spanner-sink'.*returned str.*record 5"):
        core.write(5)


def test_fail_job_handler_fails_on_a_rejected_record() -> None:
    sink = (
        SpannerSink.builder()
        .set_database(DB)
        .set_serializer(lambda r, c: event(r, kind="bad" if r == 3 else "ok"))
        .build()
    )
    config = sink._sink_config()
    api = FakeApi(reject_kind("bad"))
    connect_on_open(config, api)
    core = SinkWriter(config)
    core.open(SubtaskInfo("spanner-sink"))
    for i in range(5):
        core.write(i)
    with pytest.raises(RecordRejectedError, match="rejected record 3: table Events"):
        core.flush()


def test_help_shows_the_sinks_own_documentation() -> None:
    """help() must not show PyFlink's inherited "java Sink object" constructor text."""
    import pydoc

    from pyflink_gcp.spanner import SpannerSink

    text = pydoc.render_doc(SpannerSink, renderer=pydoc.plaintext)
    assert "java Sink object" not in text
    assert (SpannerSink.__doc__ or "").split("\n", 1)[0] in text
    assert "SpannerSink.builder()...build()" in text
