"""CloudTasksSinkBuilder: what build() checks and what reaches the sink's configuration."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import cloudpickle
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory
from pyflink_gcp.core import ConfigurationError, FailureHandler, WriterContext
from pyflink_gcp.core.functions import RecordOnly

URL = "http://127.0.0.1:9/hooks"


def _resolver(record: object, ctx: object) -> QueueDestination:
    return QueueDestination.of("p", "l", "q")


def _builder() -> Any:
    return (
        CloudTasksSink.builder()
        .set_destination_resolver(_resolver)
        .set_serializer(CloudTasksSerializationSchema.http_target(URL))
    )


def test_builder_requires_resolver_and_serializer() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        CloudTasksSink.builder().set_serializer(
            CloudTasksSerializationSchema.http_target(URL)
        ).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        CloudTasksSink.builder().set_destination_resolver(_resolver).build()


def test_set_writer_options_takes_cloud_tasks_options_only() -> None:
    with pytest.raises(ConfigurationError, match="takes CloudTasksWriterOptions"):
        _builder().set_writer_options({"max_in_flight_requests": 3})


def test_a_serializer_that_is_neither_schema_nor_callable_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="CloudTasksSerializationSchema or a callable"):
        _builder().set_serializer("not a serializer").build()


def test_builder_names_what_does_not_pickle() -> None:
    lock = threading.Lock()

    def resolver(record: object, ctx: object) -> QueueDestination:
        with lock:
            return QueueDestination.of("p", "l", "q")

    with pytest.raises(ConfigurationError, match="'lock'"):
        (
            CloudTasksSink.builder()
            .set_sink_name("hooks")
            .set_destination_resolver(resolver)
            .set_serializer(CloudTasksSerializationSchema.http_target(URL))
            .build()
        )


def test_writer_options_reach_the_sink_config_and_the_factory() -> None:
    options = (
        CloudTasksWriterOptions.builder()
        .max_buffered_records(777)
        .max_buffer_time(timedelta(milliseconds=250))
        .idle_timeout(timedelta(minutes=3))
        .max_active_destinations(8)
        .per_destination_metrics(True)
        .max_in_flight_requests(32)
        .retry_deadline(timedelta(seconds=7))
        .build()
    )
    sink = _builder().set_writer_options(options).set_endpoint("http://h:1").build()
    config = sink._sink_config()
    assert config.max_buffered_records == 777
    assert config.max_buffer_time_ms == 250
    assert config.idle_timeout_s == 180.0
    assert config.max_active == 8
    assert config.per_destination_metrics is True
    factory = config.factory
    assert isinstance(factory, CloudTasksWriterFactory)
    assert factory.options is options and factory.endpoint == "http://h:1"
    assert factory.retry.deadline_s == 7.0


def test_default_options_keep_the_bundle_and_lifetimes() -> None:
    config = _builder().build()._sink_config()
    assert (config.max_buffered_records, config.max_buffer_time_ms) == (10_000, 1_000)
    assert (config.idle_timeout_s, config.max_active) == (900.0, None)
    assert config.factory.options == CloudTasksWriterOptions()


def test_idle_timeout_none_keeps_queue_writers() -> None:
    options = CloudTasksWriterOptions.builder().idle_timeout(None).build()
    assert _builder().set_writer_options(options).build()._sink_config().idle_timeout_s is None


def test_a_task_callable_is_adapted_to_record_and_context_and_pickles() -> None:
    def one_arg(record: Any) -> tasks_v2.Task:
        return tasks_v2.Task(http_request=tasks_v2.HttpRequest(url=f"{URL}/{record}"))

    def two_args(record: Any, ctx: Any) -> tasks_v2.Task:
        return tasks_v2.Task(http_request=tasks_v2.HttpRequest(url=f"{URL}/{ctx.subtask_index}"))

    sink = (
        _builder()
        .set_sink_name("hooks")
        .set_serializer(one_arg)
        .set_failure_handler(FailureHandler.log_and_drop())
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "hooks" and config.sink_name == "hooks"
    assert isinstance(config.serializer, RecordOnly) and config.serializer.fn is one_arg
    copy = cloudpickle.loads(cloudpickle.dumps(config))
    assert copy.serializer("r", WriterContext()).http_request.url == f"{URL}/r"
    assert copy.factory.options == CloudTasksWriterOptions()

    config = _builder().set_serializer(two_args).build()._sink_config()
    assert config.serializer is two_args


def test_help_shows_the_sinks_own_documentation() -> None:
    """help() must not show PyFlink's inherited "java Sink object" constructor text."""
    import pydoc

    from pyflink_gcp.cloudtasks import CloudTasksSink

    text = pydoc.render_doc(CloudTasksSink, renderer=pydoc.plaintext)
    assert "java Sink object" not in text
    assert (CloudTasksSink.__doc__ or "").split("\n", 1)[0] in text
    assert "CloudTasksSink.builder()...build()" in text
