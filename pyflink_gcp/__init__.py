"""pyflink-gcp: Google Cloud sinks for PyFlink DataStream jobs with per-record dynamic destinations.

Service sinks live in subpackages (``pyflink_gcp.pubsub``, ``pyflink_gcp.bigquery``, ...), each
behind an optional extra. This top level holds what every sink shares.
"""

from pyflink_gcp._version import __version__
from pyflink_gcp.core.failure import FailedRecord, FailureHandler
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.core.lineage import LineageDataset, LineageListener
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.results import WriteResult
from pyflink_gcp.core.types import UnroutableRecord, WriterContext

__all__ = [
    "CreateDisposition",
    "FailedRecord",
    "FailureHandler",
    "FieldSelection",
    "LineageDataset",
    "LineageListener",
    "UnroutableRecord",
    "WriteResult",
    "WriterContext",
    "__version__",
]
