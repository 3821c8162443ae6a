"""Service-agnostic core: contract types, failure handling, retries, the writer registry and the
PyFlink runtime, options, channels. Nothing here imports a Google Cloud client library (only
gRPC, which every client library brings)."""

from pyflink_gcp.core.errors import (
    ConfigurationError,
    CreationLimitExceededError,
    DestinationNotFoundError,
    RecordRejectedError,
    RecordSchemaError,
    ResolverError,
    SerializerError,
    SinkError,
    WriteError,
)
from pyflink_gcp.core.failure import DeadLetterQueue, FailedRecord, FailureHandler
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.core.lineage import LineageDataset, LineageListener
from pyflink_gcp.core.options import (
    CreateDisposition,
    CreatingWriterOptions,
    DestinationWriterOptions,
    WriterOptions,
)
from pyflink_gcp.core.results import WriteResult
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.types import Destination, UnroutableRecord, WriterContext
from pyflink_gcp.core.writer import DestinationWriter, WriterFactory

__all__ = [
    "ConfigurationError",
    "CreateDisposition",
    "CreatingWriterOptions",
    "CreationLimitExceededError",
    "DeadLetterQueue",
    "Destination",
    "DestinationNotFoundError",
    "DestinationWriterOptions",
    "DestinationWriter",
    "FailedRecord",
    "FailureHandler",
    "FieldSelection",
    "LineageDataset",
    "LineageListener",
    "RecordRejectedError",
    "RecordSchemaError",
    "ResolverError",
    "RetryPolicy",
    "SerializerError",
    "SinkError",
    "SubtaskInfo",
    "UnroutableRecord",
    "WriteError",
    "WriteResult",
    "WriterContext",
    "WriterFactory",
    "WriterOptions",
]
