"""Row values as JSON, for the newline-delimited JSON files ``WriteMethod.FILE_LOADS`` stages.

The forms are the ones BigQuery's loader reads: TIMESTAMP as ISO 8601 in UTC with
microseconds, DATE as ``YYYY-MM-DD``, BYTES as base64, NUMERIC and DATETIME as strings. The
file writer (:mod:`pyflink_gcp.bigquery.file_formats`) applies them column by column with the
table's schema.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyflink_gcp.bigquery import values

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = date(1970, 1, 1)


def _timestamp(value: Any) -> str:
    micros = values.to_timestamp(value)
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _date(value: Any) -> str:
    return (_EPOCH_DATE + timedelta(days=values.to_date(value))).isoformat()


def _bytes(value: Any) -> str:
    return base64.b64encode(values.to_bytes(value)).decode("ascii")


#: BigQuery type → the converter to the JSON value the loader reads.
JSON_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "INT64": values.to_int64,
    "FLOAT64": values.to_float64,
    "BOOL": values.to_bool,
    "STRING": values.to_string,
    "BYTES": _bytes,
    "TIMESTAMP": _timestamp,
    "DATE": _date,
    "DATETIME": values.to_datetime,
    "TIME": values.to_time,
    "NUMERIC": values.to_numeric,
    "BIGNUMERIC": values.to_numeric,
    "JSON": values.to_json,
    "GEOGRAPHY": values.to_string,
    "INTERVAL": values.to_string,
}
