"""``CloudTasksSink``: turn each record into an HTTP task on the queue its resolver names."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.cloudtasks.options import CloudTasksWriterOptions
from pyflink_gcp.cloudtasks.serialization import CloudTasksSerializationSchema, TaskSerializer
from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.functions import as_resolver, ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig


class CloudTasksSink(DynamicSink):
    """A sink that creates one Cloud Tasks HTTP task per record, on the queue its resolver names.

    Example::

        sink = (CloudTasksSink.builder()
                .set_destination_resolver(
                    lambda e, ctx: QueueDestination.of("p", "us-central1",
                                                       f"webhooks-{e['customer_id'] % 4}"))
                .set_serializer(
                    CloudTasksSerializationSchema.http_target("https://hooks.example.com/orders")
                    .with_body(lambda e: json.dumps(e).encode(), content_type="application/json")
                    .with_task_id(lambda e: e["event_id"]))
                .build())
        ds.sink_to(sink)

    At least once: every task of a record received before a checkpoint barrier is created (or
    handed to the failure handler) before the checkpoint completes. With ``with_task_id`` a
    replayed record maps to the same task name and creates no second task; without it, a replay
    after a failure can create duplicates. The sink never creates queues.
    """

    @staticmethod
    def builder() -> CloudTasksSinkBuilder:
        return CloudTasksSinkBuilder()


class CloudTasksSinkBuilder:
    """Builder of :class:`CloudTasksSink`. Only the resolver and the serializer are required."""

    def __init__(self) -> None:
        self._name = "cloudtasks-sink"
        self._resolver: Any = None
        self._serializer: Any = None
        self._options = CloudTasksWriterOptions()
        self._failure_handler = FailureHandler.fail_job()
        self._endpoint: str | None = None

    def set_sink_name(self, name: str) -> CloudTasksSinkBuilder:
        """The name used in errors, logs and metrics (default ``cloudtasks-sink``)."""
        self._name = name
        return self

    def set_destination_resolver(self, resolver: Any) -> CloudTasksSinkBuilder:
        """``(record, WriterContext) -> QueueDestination``, or an object with ``resolve``."""
        self._resolver = resolver
        return self

    def set_serializer(self, serializer: Any) -> CloudTasksSinkBuilder:
        """A :class:`CloudTasksSerializationSchema`, or a callable ``record -> tasks_v2.Task``
        (for App Engine targets, OIDC tokens ...; None skips the record)."""
        self._serializer = serializer
        return self

    def set_writer_options(self, options: CloudTasksWriterOptions) -> CloudTasksSinkBuilder:
        """Calls in flight, channels, retry deadline, task size limit."""
        self._options = options
        return self

    def set_failure_handler(self, handler: FailureHandler) -> CloudTasksSinkBuilder:
        """What happens to oversized or refused tasks (default: fail the job)."""
        self._failure_handler = handler
        return self

    def set_endpoint(self, endpoint: str) -> CloudTasksSinkBuilder:
        """``host:port`` of the service (TLS, ADC); an ``http://host:port`` URL means an
        emulator. Default: ``CLOUD_TASKS_EMULATOR_HOST`` if set, else the service."""
        self._endpoint = endpoint
        return self

    def build(self) -> CloudTasksSink:
        name = self._name
        if not isinstance(name, str) or not name:
            raise ConfigurationError("set_sink_name() takes a non-empty string")
        as_resolver(self._resolver, name)
        serializer = self._serializer
        if serializer is None:
            raise ConfigurationError(
                f"sink '{name}': set_serializer() is required, e.g. "
                "CloudTasksSerializationSchema.http_target(url).with_body(fn)"
            )
        if not isinstance(serializer, CloudTasksSerializationSchema | TaskSerializer):
            if not callable(serializer):
                raise ConfigurationError(
                    f"sink '{name}': the serializer must be a CloudTasksSerializationSchema or a "
                    f"callable record -> tasks_v2.Task, got {type(serializer).__name__}"
                )
            serializer = TaskSerializer(serializer)
        if not isinstance(self._options, CloudTasksWriterOptions):
            raise ConfigurationError(
                f"sink '{name}': set_writer_options() takes CloudTasksWriterOptions"
            )
        if not isinstance(self._failure_handler, FailureHandler):
            raise ConfigurationError(f"sink '{name}': set_failure_handler() takes a FailureHandler")
        if self._endpoint is not None and (
            not isinstance(self._endpoint, str) or not self._endpoint
        ):
            raise ConfigurationError(f"sink '{name}': set_endpoint() takes 'host:port' or a URL")
        ensure_picklable(self._resolver, "destination resolver", name)
        ensure_picklable(serializer, "serializer", name)
        dlq = self._failure_handler.dead_letter_queue
        if dlq is not None:
            ensure_picklable(dlq, "dead-letter queue", name)
        options = self._options
        factory = CloudTasksWriterFactory(
            sink_name=name,
            options=options,
            endpoint=self._endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline.total_seconds()),
        )
        config = SinkConfig(
            sink_name=name,
            factory=factory,
            resolver=self._resolver,
            serializer=serializer,
            failure_handler=self._failure_handler,
            idle_timeout_s=options.idle_timeout.total_seconds(),
        )
        return CloudTasksSink(config)
