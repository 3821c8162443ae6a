"""Rows as newline-delimited JSON, the format ``WriteMethod.FILE_LOADS`` stages for load jobs.

A load job parses each line against the table's schema; a line it cannot parse fails the whole
job, long after the record that made it is gone. So every row is converted here, with the
table's schema and the lenient conversion of the Storage Write encoder
(:class:`~pyflink_gcp.bigquery.rows.ColumnTree`), when it is staged: a row that does not fit is
a :class:`~pyflink_gcp.bigquery.rows.RowError` for the failure handler, with its record. The
JSON forms are the ones BigQuery's loader reads: TIMESTAMP as ISO 8601 in UTC with
microseconds, DATE as ``YYYY-MM-DD``, BYTES as base64, NUMERIC and DATETIME as strings.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyflink_gcp.bigquery import rows
from pyflink_gcp.bigquery.rows import ColumnTree, RowError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = date(1970, 1, 1)


def _timestamp(value: Any) -> str:
    micros = rows.to_timestamp(value)
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _date(value: Any) -> str:
    return (_EPOCH_DATE + timedelta(days=rows.to_date(value))).isoformat()


def _bytes(value: Any) -> str:
    return base64.b64encode(rows.to_bytes(value)).decode("ascii")


#: BigQuery type → the converter to the JSON value the loader reads.
JSON_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "INT64": rows.to_int64,
    "FLOAT64": rows.to_float64,
    "BOOL": rows.to_bool,
    "STRING": rows.to_string,
    "BYTES": _bytes,
    "TIMESTAMP": _timestamp,
    "DATE": _date,
    "DATETIME": rows.to_datetime,
    "TIME": rows.to_time,
    "NUMERIC": rows.to_numeric,
    "BIGNUMERIC": rows.to_numeric,
    "JSON": rows.to_json,
    "GEOGRAPHY": rows.to_string,
    "INTERVAL": rows.to_string,
}


class JsonRowEncoder:
    """Encodes the rows of one table as newline-delimited JSON lines.

    Args:
        fields: The table's schema (``google.cloud.bigquery.SchemaField`` s).
        ignore_unknown_values: Drop row keys that are not columns instead of rejecting the row.
    """

    def __init__(self, fields: Sequence[Any], *, ignore_unknown_values: bool = False) -> None:
        self._columns = ColumnTree(fields, JSON_CONVERTERS)
        self._ignore_unknown = ignore_unknown_values

    def encode(self, row: Mapping[str, Any]) -> bytes:
        """The JSON line of ``row``, newline included. Raises RowError for a row that does not
        fit the schema."""
        converted = self._columns.convert(row, self._ignore_unknown)
        try:
            text = json.dumps(converted, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError as exc:
            raise RowError(f"cannot write the row as JSON: {exc}") from None
        return text.encode("utf-8") + b"\n"
