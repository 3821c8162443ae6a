"""Value encoders: one per Spanner column type, ``(values, python_value) -> None``.

Each appends one ``google.protobuf.Value`` to ``values`` (the repeated field of a
``ListValue``) in the wire form Spanner expects for the column's type, or raises
:class:`WrongType`. The writer picks one encoder per column when it first sees a mutation's
shape (:func:`encoder_for`), so a row is encoded without looking at the schema again. The
exact-type tests come first because they are the common case and the cheapest.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import numbers
import re
import uuid
from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message

#: An encoder: appends the wire form of one Python value to a repeated ``Value`` field.
Encoder = Callable[[Any, Any], None]

_NULL = struct_pb2.NULL_VALUE
_UTC = datetime.UTC


class WrongType(Exception):
    """A Python value that the column's type cannot take (a record-shaped failure)."""


def _enc_string(out: Any, v: Any) -> None:
    if type(v) is str:
        out.add(string_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise WrongType


def _enc_int64(out: Any, v: Any) -> None:
    t = type(v)
    if t is int:
        out.add(string_value=str(v))
    elif v is None:
        out.add(null_value=_NULL)
    elif t is str:
        out.add(string_value=v)
    elif isinstance(v, numbers.Integral) and t is not bool:
        out.add(string_value=str(int(v)))
    else:
        raise WrongType


def _enc_float(out: Any, v: Any) -> None:
    t = type(v)
    if t is float or (t is not bool and isinstance(v, numbers.Real) and t is not str):
        f = float(v)
        if math.isfinite(f):
            out.add(number_value=f)
        else:
            out.add(string_value="NaN" if f != f else ("Infinity" if f > 0 else "-Infinity"))
    elif v is None:
        out.add(null_value=_NULL)
    elif t is str:
        out.add(string_value=v)
    else:
        raise WrongType


def _enc_bool(out: Any, v: Any) -> None:
    if type(v) is bool:
        out.add(bool_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise WrongType


def _enc_bytes(out: Any, v: Any) -> None:
    if isinstance(v, bytes | bytearray | memoryview):
        out.add(string_value=base64.b64encode(v).decode("ascii"))
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise WrongType


def _enc_timestamp(out: Any, v: Any) -> None:
    if isinstance(v, datetime.datetime):
        rfc3339 = getattr(v, "rfc3339", None)  # api_core's DatetimeWithNanoseconds
        if callable(rfc3339):
            out.add(string_value=rfc3339())
            return
        if v.tzinfo is not None:
            v = v.astimezone(_UTC).replace(tzinfo=None)
        out.add(string_value=v.isoformat() + "Z")
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        raise WrongType


def _enc_date(out: Any, v: Any) -> None:
    if type(v) is datetime.date or (
        isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    ):
        out.add(string_value=v.isoformat())
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        raise WrongType


def _enc_numeric(out: Any, v: Any) -> None:
    if isinstance(v, decimal.Decimal):
        out.add(string_value=format(v, "f"))
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    elif isinstance(v, numbers.Integral) and type(v) is not bool:
        out.add(string_value=str(int(v)))
    else:
        raise WrongType


def _enc_json(out: Any, v: Any) -> None:
    if v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        try:
            text = json.dumps(v, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise WrongType from exc
        out.add(string_value=text)


def _enc_uuid(out: Any, v: Any) -> None:
    if isinstance(v, uuid.UUID | str):
        out.add(string_value=str(v))
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise WrongType


def _enc_text(out: Any, v: Any) -> None:
    """Types whose values travel as strings Spanner parses (INTERVAL, unknown future types)."""
    if type(v) is str:
        out.add(string_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise WrongType


def _enc_proto(out: Any, v: Any) -> None:
    if isinstance(v, Message):
        v = v.SerializeToString()
    _enc_bytes(out, v)


def _enc_enum(out: Any, v: Any) -> None:
    _enc_int64(out, v)


def _array_encoder(element: Encoder) -> Encoder:
    def encode(out: Any, v: Any) -> None:
        if isinstance(v, list | tuple):
            values = out.add().list_value.values
            for item in v:
                element(values, item)
        elif v is None:
            out.add(null_value=_NULL)
        else:
            raise WrongType

    return encode


_SCALAR_ENCODERS: dict[str, Encoder] = {
    "STRING": _enc_string,
    "INT64": _enc_int64,
    "FLOAT64": _enc_float,
    "FLOAT32": _enc_float,
    "BOOL": _enc_bool,
    "BYTES": _enc_bytes,
    "TIMESTAMP": _enc_timestamp,
    "DATE": _enc_date,
    "NUMERIC": _enc_numeric,
    "JSON": _enc_json,
    "UUID": _enc_uuid,
    "INTERVAL": _enc_text,
    "PROTO": _enc_proto,
    "ENUM": _enc_enum,
}


# ``ARRAY<T>``, optionally annotated like ``ARRAY<FLOAT32>(vector_length=>128)``.
_ARRAY_TYPE = re.compile(r"ARRAY<(.+)>(?:\([^()]*\))?", re.IGNORECASE)


def encoder_for(spanner_type: str) -> Encoder:
    """The value encoder of a column type as INFORMATION_SCHEMA spells it (``ARRAY<STRING(10)>``)."""
    t = spanner_type.strip()
    array = _ARRAY_TYPE.fullmatch(t)
    if array:
        return _array_encoder(encoder_for(array.group(1)))
    base = t.split("(", 1)[0].split("<", 1)[0].strip().upper()
    return _SCALAR_ENCODERS.get(base, _enc_text)
