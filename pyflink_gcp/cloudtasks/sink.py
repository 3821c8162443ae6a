"""``CloudTasksSink``: turn each record into an HTTP task on the queue its resolver names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyflink_gcp.cloudtasks.options import CloudTasksWriterOptions
from pyflink_gcp.cloudtasks.serialization import CloudTasksSerializationSchema
from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory
from pyflink_gcp.core.builder import SinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink

if TYPE_CHECKING:
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
                    .with_body(lambda e, ctx: json.dumps(e).encode(),
                               content_type="application/json")
                    .with_task_id(lambda e, ctx: e["event_id"]))
                .build())
        ds.sink_to(sink)

    At least once: every task of a record received before a checkpoint barrier is created (or
    handed to the failure handler) before the checkpoint completes. With ``with_task_id`` a
    replayed record maps to the same task name and creates no second task; without it, a replay
    after a failure can create duplicates. The sink never creates queues.
    """

    def __init__(self, config: SinkConfig) -> None:
        """Made by ``CloudTasksSink.builder()...build()``, which validates the configuration; not
        called directly."""
        super().__init__(config)

    @staticmethod
    def builder() -> CloudTasksSinkBuilder:
        return CloudTasksSinkBuilder()


class CloudTasksSinkBuilder(SinkBuilder):
    """Builder of :class:`CloudTasksSink`. Only the resolver and the serializer are required.

    The serializer is a :class:`CloudTasksSerializationSchema`, or a callable
    ``(record, ctx) -> tasks_v2.Task`` (or ``record -> Task``) for what the schema does not
    build (App Engine targets, OIDC tokens ...); None skips the record. Writer options:
    ``set_writer_options(CloudTasksWriterOptions.builder()...build())``.
    """

    default_name = "cloudtasks-sink"
    options_type = CloudTasksWriterOptions

    def build(self) -> CloudTasksSink:
        name = self._validate_common("CloudTasksSerializationSchema.http_target(url).with_body(fn)")
        serializer = self._serializer
        if not isinstance(serializer, CloudTasksSerializationSchema) and not callable(serializer):
            raise ConfigurationError(
                f"sink '{name}': the serializer must be a CloudTasksSerializationSchema or a "
                f"callable (record, ctx) -> tasks_v2.Task, got {type(serializer).__name__}"
            )
        ensure_picklable(serializer, "serializer", name)
        options: CloudTasksWriterOptions = self._options
        factory = CloudTasksWriterFactory(
            sink_name=name,
            options=options,
            endpoint=self._endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline_s),
        )
        return CloudTasksSink(self._sink_config(name, factory, serializer))
