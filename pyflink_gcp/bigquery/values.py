"""Row values converted to the forms BigQuery takes: one converter per BigQuery type.

Each converter takes a value in its natural Python form (an int, a string, a ``datetime``, a
``Decimal``...) and returns its canonical wire value (TIMESTAMP → int64 epoch microseconds, DATE
→ int32 days since the epoch, DATETIME/TIME → canonical strings, NUMERIC/BIGNUMERIC → decimal
strings, JSON → JSON text), or raises :class:`RowError` naming what does not fit. They are apart
from the protobuf rows (:mod:`pyflink_gcp.bigquery.rows`) because every encoding shares them:
the protobuf rows convert with them, the Arrow batches (:mod:`pyflink_gcp.bigquery.arrow_rows`)
check TIMESTAMP ints against the same ranges, the staged files of ``FILE_LOADS``
(:mod:`pyflink_gcp.bigquery.json_rows`, :mod:`pyflink_gcp.bigquery.file_formats`) build on
them, and primary keys are compared through them (so ``"2024-01-01T00:00:00Z"`` and
``1704067200000000`` are one TIMESTAMP key).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from pyflink_gcp.bigquery.serialization import CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = date(1970, 1, 1)
_MICRO = timedelta(microseconds=1)
# Enough digits for BIGNUMERIC (76.76); the default context (28) would round NUMERIC values.
_DECIMALS = decimal.Context(prec=160)
_SEQUENCE_NUMBER = re.compile(r"^[0-9A-Fa-f]{1,16}(/[0-9A-Fa-f]{1,16}){0,3}$")
_CHANGE_TYPES = frozenset({"UPSERT", "DELETE"})


class RowError(ValueError):
    """A row that cannot be written for its content (the record's fault, not the sink's)."""


# Each converter raises RowError for a value that does not fit the column.


def kind_of(value: Any) -> str:
    """The type name of ``value``, for error messages."""
    return type(value).__name__


def to_int64(value: Any) -> int:
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise RowError(f"expected an INT64, got {kind_of(value)} {value!r:.60}")


def to_float64(value: Any) -> float:
    if isinstance(value, int | float | Decimal):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise RowError(f"expected a FLOAT64, got {kind_of(value)} {value!r:.60}")


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise RowError(f"expected a BOOL, got {kind_of(value)} {value!r:.60}")


def to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return str(value)
    raise RowError(f"expected a STRING, got {kind_of(value)}")


def to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise RowError(
                "expected BYTES or a base64 string, got a string that is not base64"
            ) from None
    raise RowError(f"expected BYTES, got {kind_of(value)}")


def _parse_datetime(text: str) -> datetime:
    cleaned = text.strip()
    if cleaned.endswith(" UTC"):
        cleaned = cleaned[:-4] + "+00:00"
    return datetime.fromisoformat(cleaned)


#: BigQuery's TIMESTAMP range, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z, in epoch
#: microseconds.
TIMESTAMP_MIN_MICROS = -62_135_596_800_000_000
TIMESTAMP_MAX_MICROS = 253_402_300_799_999_999
#: Ints from here to :data:`MILLIS_FROM` are epoch seconds (see :func:`epoch_micros`).
SECONDS_FROM = 10**8
#: Ints from here to :data:`MICROS_FROM` are epoch milliseconds.
MILLIS_FROM = 10**11
#: Ints from here up are epoch microseconds (1973-03-03T09:46:40Z onwards).
MICROS_FROM = 10**14


def _instant(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).isoformat().replace("+00:00", "Z")


def is_epoch_micros(value: int) -> bool:
    """Whether :func:`epoch_micros` takes the int ``value`` as it is."""
    return (
        MICROS_FROM <= value <= TIMESTAMP_MAX_MICROS or TIMESTAMP_MIN_MICROS <= value < SECONDS_FROM
    )


def epoch_micros(value: int) -> int:
    """``value``, an int TIMESTAMP, as epoch microseconds; RowError for an int in another unit.

    Ints are epoch microseconds, BigQuery's unit. An event time in seconds, milliseconds or
    nanoseconds is an int too, and taken as microseconds it would land in the first days or
    years of 1970, or past year 9999. Each range below holds values that are no plausible
    microsecond instant, and exactly the event times of one other unit, so such a value is
    refused with a message naming that unit and the value read both ways:

    - ``10**8 <= value < 10**11``: 1970-01-01T00:01:40Z to 1970-01-02T03:46:40Z as
      microseconds; as epoch **seconds**, 1973-03-03 to 5138-11-16.
    - ``10**11 <= value < 10**14``: 1970-01-02T03:46:40Z to 1973-03-03T09:46:40Z as
      microseconds; as epoch **milliseconds**, 1973-03-03 to 5138-11-16.
    - above 253,402,300,799,999,999 or below -62,135,596,800,000,000: past 9999-12-31 or
      before 0001-01-01 as microseconds (outside the TIMESTAMP range); as epoch
      **nanoseconds**, 1978-01-11 onwards or before 1968-01-12. An int that is not even
      nanoseconds in range is refused as outside the range.

    Kept as microseconds: ``10**14`` up to the end of 9999 (1973-03-03T09:46:40Z onwards, so
    every present-day microsecond value, about ``1.7 * 10**15``); 0 to ``10**8`` (the first
    100 seconds of 1970: 0 and other small placeholders, which as seconds or milliseconds
    would be before 1973-03-03 or 1970-01-02, no plausible event time either); negative
    values back to 0001-01-01 (instants before 1970, where a microsecond value of the 1960s
    is as likely as another unit's).

    Every encoder takes TIMESTAMP ints through here: the protobuf rows, the Arrow batches
    (:mod:`pyflink_gcp.bigquery.arrow_rows` leaves a batch with such a value to the protobuf
    rows) and the staged JSON, Avro and Parquet files of ``FILE_LOADS``.
    """
    if is_epoch_micros(value):
        return value
    if SECONDS_FROM <= value < MICROS_FROM:
        unit, per = ("seconds", 1_000_000) if value < MILLIS_FROM else ("milliseconds", 1_000)
        raise RowError(
            f"TIMESTAMP {value} looks like epoch {unit} ({_instant(value * per)}); ints are "
            f"taken as epoch microseconds, which would put it at {_instant(value)}. Give "
            f"microseconds ({unit} * {per:,}) or a datetime"
        )
    if TIMESTAMP_MIN_MICROS <= value // 1000 <= TIMESTAMP_MAX_MICROS:
        raise RowError(
            f"TIMESTAMP {value} looks like epoch nanoseconds ({_instant(value // 1000)}); "
            "ints are taken as epoch microseconds, which would put it outside BigQuery's "
            "TIMESTAMP range (years 1 to 9999). Give microseconds (nanoseconds // 1,000) "
            "or a datetime"
        )
    raise RowError(
        f"TIMESTAMP {value} is outside BigQuery's TIMESTAMP range (years 1 to 9999) as "
        "epoch microseconds"
    )


def to_timestamp(value: Any) -> int:
    """Epoch microseconds. Ints are taken as microseconds (:func:`epoch_micros` refuses those
    in another unit); naive datetimes as UTC."""
    if isinstance(value, int) and not isinstance(value, bool):
        return epoch_micros(int(value))
    if isinstance(value, str):
        try:
            value = _parse_datetime(value)
        except ValueError:
            raise RowError(f"expected a TIMESTAMP, got the string {value!r:.60}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - _EPOCH) // _MICRO
    raise RowError(
        f"expected a TIMESTAMP (epoch microseconds, ISO 8601 string or datetime), got "
        f"{kind_of(value)} {value!r:.60}"
    )


def to_date(value: Any) -> int:
    """Days since the epoch."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value.strip())
        except ValueError:
            raise RowError(f"expected a DATE, got the string {value!r:.60}") from None
    if isinstance(value, datetime):
        value = value.date()
    if isinstance(value, date):
        return (value - _EPOCH_DATE).days
    raise RowError(f"expected a DATE, got {kind_of(value)} {value!r:.60}")


def to_datetime(value: Any) -> str:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` (civil time; aware datetimes are taken in UTC)."""
    if isinstance(value, str):
        try:
            value = _parse_datetime(value)
        except ValueError:
            raise RowError(f"expected a DATETIME, got the string {value!r:.60}") from None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day).isoformat(sep=" ")
    raise RowError(f"expected a DATETIME, got {kind_of(value)} {value!r:.60}")


def to_time(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = time.fromisoformat(value.strip())
        except ValueError:
            raise RowError(f"expected a TIME, got the string {value!r:.60}") from None
    if isinstance(value, time):
        return value.replace(tzinfo=None).isoformat()
    raise RowError(f"expected a TIME, got {kind_of(value)} {value!r:.60}")


def to_numeric(value: Any) -> str:
    """A canonical decimal string: ``"1.50"``, ``1.5`` and ``Decimal("1.5")`` are all ``"1.5"``."""
    if isinstance(value, bool):
        raise RowError("expected a NUMERIC, got bool")
    try:
        if isinstance(value, float):
            number = Decimal(repr(value))
        elif isinstance(value, int | Decimal):
            number = Decimal(value)
        elif isinstance(value, str):
            number = Decimal(value.strip())
        else:
            raise RowError(f"expected a NUMERIC, got {kind_of(value)} {value!r:.60}")
    except decimal.InvalidOperation:
        raise RowError(f"expected a NUMERIC, got the string {value!r:.60}") from None
    if not number.is_finite():
        raise RowError(f"NUMERIC values must be finite, got {value!r:.60}")
    if not number:
        return "0"
    return format(_DECIMALS.normalize(number), "f")


def to_json(value: Any) -> str:
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            raise RowError(f"expected JSON text, got {value!r:.60}") from None
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RowError(f"cannot write {kind_of(value)} as JSON: {exc}") from None


def to_change_type(value: Any) -> str:
    if isinstance(value, str) and value.upper() in _CHANGE_TYPES:
        return value.upper()
    raise RowError(f"{CHANGE_TYPE} must be 'UPSERT' or 'DELETE', got {value!r:.60}")


def to_sequence_number(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return format(value, "X")
    if isinstance(value, str) and _SEQUENCE_NUMBER.match(value):
        return value.upper()
    raise RowError(
        f"{CHANGE_SEQUENCE_NUMBER} must be a non-negative int or up to four '/'-separated "
        f"hexadecimal sections, got {value!r:.60}"
    )
