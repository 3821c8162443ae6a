"""Spanner sink: one database, the table named by each record's Mutation, batched commits.

Install the extra with ``pip install 'pyflink-gcp[spanner]'``::

    from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink

    sink = (SpannerSink.builder()
            .set_database(DatabaseDestination.of("my-project", "my-instance", "my-db"))
            .set_serializer(lambda e, ctx: Mutation.insert_or_update(
                "AuditEvents" if e["audit"] else "Events", {"id": e["id"], "kind": e["kind"]}))
            .build())
    ds.sink_to(sink)
"""

try:
    import google.cloud.spanner_v1  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "pyflink_gcp.spanner needs the Spanner client library (google-cloud-spanner): "
        "pip install 'pyflink-gcp[spanner]'"
    ) from exc

from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.options import (
    MAX_COMMIT_BYTES,
    MAX_MUTATIONS_PER_COMMIT,
    SpannerWriterOptions,
    SpannerWriterOptionsBuilder,
)
from pyflink_gcp.spanner.serialization import COMMIT_TIMESTAMP, KeyRange, Mutation
from pyflink_gcp.spanner.sink import SpannerSink, SpannerSinkBuilder

__all__ = [
    "COMMIT_TIMESTAMP",
    "MAX_COMMIT_BYTES",
    "MAX_MUTATIONS_PER_COMMIT",
    "DatabaseDestination",
    "KeyRange",
    "Mutation",
    "SpannerSink",
    "SpannerSinkBuilder",
    "SpannerWriterOptions",
    "SpannerWriterOptionsBuilder",
]
