"""Bigtable sink: routes each record to the table its resolver names, one batcher per table.

Install the extra with ``pip install 'pyflink-gcp[bigtable]'``. ``RowMutationEntry`` and the
mutation classes are the client library's own (``google.cloud.bigtable.data``), re-exported so a
serializer needs only this package::

    from pyflink_gcp.bigtable import BigtableSink, RowMutationEntry, SetCell, TableDestination

    sink = (BigtableSink.builder()
            .set_destination_resolver(
                lambda e, ctx: TableDestination.of("my-project", "my-instance", "events_" + e["day"]))
            .set_serializer(
                lambda e, ctx: RowMutationEntry(e["id"], [SetCell("cf", b"v", e["value"])]))
            .build())
"""

try:
    from google.cloud.bigtable.data.mutations import (
        AddToCell,
        DeleteAllFromFamily,
        DeleteAllFromRow,
        DeleteRangeFromColumn,
        Mutation,
        RowMutationEntry,
        SetCell,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "pyflink_gcp.bigtable needs the Bigtable client library (google-cloud-bigtable): "
        "pip install 'pyflink-gcp[bigtable]'"
    ) from exc

from pyflink_gcp.bigtable.destinations import TableDestination
from pyflink_gcp.bigtable.options import (
    BigtableWriterOptions,
    BigtableWriterOptionsBuilder,
    TableCreateOptions,
)
from pyflink_gcp.bigtable.sink import BigtableSink, BigtableSinkBuilder
from pyflink_gcp.core.options import CreateDisposition

__all__ = [
    "AddToCell",
    "BigtableSink",
    "BigtableSinkBuilder",
    "BigtableWriterOptions",
    "BigtableWriterOptionsBuilder",
    "CreateDisposition",
    "DeleteAllFromFamily",
    "DeleteAllFromRow",
    "DeleteRangeFromColumn",
    "Mutation",
    "RowMutationEntry",
    "SetCell",
    "TableCreateOptions",
    "TableDestination",
]
