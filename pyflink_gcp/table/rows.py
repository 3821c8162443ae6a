"""The table's columns as the Java sink describes them, and its rows as the writers take them.

The Java sink hands the Python side, in the writer's payload, a JSON description of the sink's
physical columns (name, SQL type, nested types) and says which top-level timestamp columns it
sends as epoch microseconds: PyFlink 2.3's Python coders read every TIMESTAMP and TIMESTAMP_LTZ
at millisecond precision, so a ``TIMESTAMP(6)`` travels as a BIGINT and becomes a ``datetime``
with its microseconds again here (naive for TIMESTAMP, aware in UTC for TIMESTAMP_LTZ).
Timestamps nested in a ROW, ARRAY or MAP travel at millisecond precision.

Rows arrive as ``pyflink.common.types.Row`` with the DDL's column names; the serializers and
templates take plain dicts (nested rows too), which :class:`RowConverter` makes, once per row.

A table with a ``PRIMARY KEY`` (on a connector that writes updates) receives Flink's upsert
changelog: inserts and ``UPDATE_AFTER`` rows are upserts (plain dicts), and a ``DELETE`` becomes
a :class:`DeletedRow`, so the adapters can tell the two apart without a pseudo-column that could
clash with a column's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_NESTED = frozenset({"ROW", "ARRAY", "MAP", "MULTISET"})
LTZ = "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
NTZ = "TIMESTAMP_WITHOUT_TIME_ZONE"


@dataclass(frozen=True)
class Column:
    """One physical column of the sink's table.

    Attributes:
        name: The DDL's column name.
        type: Its type as the Java side describes it: ``root`` (Flink's ``LogicalTypeRoot``),
            ``nullable``, ``sql`` (the summary string), ``precision``/``scale`` where the type
            has them, and ``fields`` / ``element`` / ``key`` + ``value`` for nested types.
        micros: Whether the column arrives as epoch microseconds (a timestamp above millisecond
            precision).
    """

    name: str
    type: dict[str, Any]
    micros: bool = False

    @property
    def root(self) -> str:
        return str(self.type["root"])


class DeletedRow(dict[str, Any]):
    """A row the changelog deletes (a ``DELETE``): its columns, the primary key's included."""

    __slots__ = ()


@dataclass(frozen=True)
class TableInfo:
    """What the Java sink says about the table: the sink's name, the columns, the primary key.

    ``primary_key`` is empty for an insert-only table; with one, the table takes a changelog.
    """

    sink_name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    @staticmethod
    def from_json(text: str) -> TableInfo:
        """Parse the payload's schema document."""
        document = json.loads(text)
        columns = tuple(
            Column(c["name"], c["type"], bool(c.get("micros", False))) for c in document["columns"]
        )
        key = tuple(str(k) for k in document.get("primary_key", ()))
        return TableInfo(str(document["sink_name"]), columns, key)


def _naive_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _utc_micros(value: int) -> datetime:
    return _EPOCH_UTC + timedelta(microseconds=value)


def _plain(value: Any) -> Any:
    """Nested Rows as dicts, inside lists and maps too."""
    as_dict = getattr(value, "as_dict", None)
    if as_dict is not None:  # a pyflink Row (the only values with as_dict here)
        return {k: _plain(v) for k, v in as_dict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _has_row(type_: dict[str, Any]) -> bool:
    root = type_["root"]
    if root == "ROW":
        return True
    return any(_has_row(type_[k]) for k in ("element", "key", "value") if k in type_)


class RowConverter:
    """A table row as the dict the serializers and templates take: ``{column: value}``.

    Only the columns that need it are converted: microsecond timestamps and nested rows. The
    rest is one ``dict(zip(...))`` per row.
    """

    __slots__ = ("_names", "_fixes")

    def __init__(self, columns: Sequence[Column]) -> None:
        self._names = tuple(c.name for c in columns)
        fixes: list[tuple[str, Callable[[Any], Any]]] = []
        for column in columns:
            if column.micros:
                fixes.append((column.name, _utc_micros if column.root == LTZ else _naive_micros))
            elif column.root in _NESTED and _has_row(column.type):
                fixes.append((column.name, _plain))
        self._fixes = tuple(fixes)

    def __call__(self, row: Any) -> dict[str, Any]:
        record = dict(zip(self._names, row, strict=True))
        for name, fix in self._fixes:
            value = record[name]
            if value is not None:
                record[name] = fix(value)
        return record
