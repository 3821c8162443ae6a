"""Value conversion: natural Python values → the canonical wire values of each BigQuery type."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from pyflink_gcp.bigquery.values import (
    RowError,
    to_date,
    to_datetime,
    to_json,
    to_numeric,
    to_sequence_number,
    to_time,
    to_timestamp,
)
from tests.unit.bigquery.test_rows import MICROS, SECONDS


def test_converters_are_canonical() -> None:
    assert to_timestamp("2024-01-01T01:00:00+01:00") == MICROS
    assert to_timestamp(datetime(2024, 1, 1)) == MICROS  # naive = UTC
    assert to_date("1970-01-02") == 1
    assert to_datetime("2024-01-01T10:00:00") == "2024-01-01 10:00:00"
    assert to_datetime(date(2024, 1, 1)) == "2024-01-01 00:00:00"
    assert to_time("10:00:00.500000") == "10:00:00.500000"
    assert [to_numeric(v) for v in ("100", 1e2, Decimal("1E+2"), "-0.0", "0.10")] == [
        "100",
        "100",
        "100",
        "0",
        "0.1",
    ]
    # No rounding to the default 28 digits of Python's decimal context.
    digits = "9" * 38 + "." + "9" * 38
    assert to_numeric(digits) == digits
    assert to_json('{"a": 1}') == '{"a": 1}'
    assert to_sequence_number("ff/1") == "FF/1"


def test_the_millisecond_value_of_a_plausible_event_time_names_where_it_would_land() -> None:
    with pytest.raises(RowError) as err:
        to_timestamp(SECONDS * 1_000)
    assert str(err.value) == (
        "TIMESTAMP 1704067200000 looks like epoch milliseconds (2024-01-01T00:00:00Z); ints are "
        "taken as epoch microseconds, which would put it at 1970-01-20T17:21:07.200000Z. Give "
        "microseconds (milliseconds * 1,000) or a datetime"
    )


def test_an_int_outside_the_timestamp_range_in_any_unit_is_refused() -> None:
    for value in (10**30, -(10**30)):
        with pytest.raises(RowError, match=f"TIMESTAMP {value} is outside BigQuery's TIMESTAMP"):
            to_timestamp(value)
