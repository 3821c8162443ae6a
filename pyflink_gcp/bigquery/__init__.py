"""BigQuery sink: append each record to the table its resolver names, through the Storage Write
API's default stream.

Needs the ``bigquery`` extra: ``pip install "pyflink-gcp[bigquery]"``.

``TableDestination.of(dataset, table)`` is ``TableDestination.of(project, dataset, table)`` in the project ``GOOGLE_CLOUD_PROJECT``
names where the destination is built (docs/production.md).
"""

try:
    import google.cloud.bigquery
    import google.cloud.bigquery_storage_v1  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "pyflink_gcp.bigquery needs google-cloud-bigquery and google-cloud-bigquery-storage: "
        "pip install 'pyflink-gcp[bigquery]'"
    ) from exc

from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.options import (
    BigQueryFileLoadsOptions,
    BigQueryFileLoadsOptionsBuilder,
    BigQueryWriterOptions,
    BigQueryWriterOptionsBuilder,
    FileFormat,
    OrderingMode,
    RowFormat,
    WriteMethod,
)
from pyflink_gcp.bigquery.schema_update import (
    MissingValues,
    SchemaUpdate,
    SchemaUpdateError,
    UnknownFields,
)
from pyflink_gcp.bigquery.serialization import BigQuerySerializer
from pyflink_gcp.bigquery.sink import BigQuerySink, BigQuerySinkBuilder
from pyflink_gcp.bigquery.table_spec import TableSchema, TableSchemaError
from pyflink_gcp.core.options import CreateDisposition

__all__ = [
    "BigQueryFileLoadsOptions",
    "BigQueryFileLoadsOptionsBuilder",
    "BigQuerySerializer",
    "BigQuerySink",
    "BigQuerySinkBuilder",
    "BigQueryWriterOptions",
    "BigQueryWriterOptionsBuilder",
    "CreateDisposition",
    "FileFormat",
    "MissingValues",
    "OrderingMode",
    "RowFormat",
    "SchemaUpdate",
    "SchemaUpdateError",
    "TableDestination",
    "TableSchema",
    "TableSchemaError",
    "UnknownFields",
    "WriteMethod",
]
