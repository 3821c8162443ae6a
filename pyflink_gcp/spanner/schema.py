"""The database schema a Spanner writer reads when it opens, and Spanner's mutation count.

The writer needs the schema for three things: to reject a mutation naming an unknown table or
column with a clear error before it reaches a commit, to encode each value for its column's
type, and to count mutations the way Spanner does so that a commit stays under the limit.

How Spanner counts (the figures the writer uses; see ``docs/spanner.md`` for the sources):

- An insert, update, insert-or-update or replace counts one mutation per column it sets
  (primary key columns included).
- A delete counts one mutation per key or key range, whatever the number of columns.
- Changes to secondary indexes count too (foreign-key backing indexes included). Spanner
  documents this exactly only for deletes: each secondary index counts one more mutation per
  deleted row. For writes it says only that index changes are counted; the writer therefore
  counts, for each secondary index a write may change, the index's columns (key and STORING)
  plus one for replacing the old entry. That is at least every published account of the rule,
  so a commit is never cut later than it should be.

An insert, insert-or-update or replace may create a row and so touches every secondary index;
an update touches only the indexes that contain a column it sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyflink_gcp.spanner.serialization import UPDATE

#: Schemas that hold system views, not tables a sink may write.
_SYSTEM_SCHEMAS = "('INFORMATION_SCHEMA', 'SPANNER_SYS')"

TABLES_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME FROM INFORMATION_SCHEMA.TABLES "
    f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN {_SYSTEM_SCHEMAS}"
)
COLUMNS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, SPANNER_TYPE, IS_GENERATED "
    f"FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA NOT IN {_SYSTEM_SCHEMAS} "
    "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
)
INDEX_COLUMNS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, INDEX_TYPE, COLUMN_NAME, ORDINAL_POSITION "
    f"FROM INFORMATION_SCHEMA.INDEX_COLUMNS WHERE TABLE_SCHEMA NOT IN {_SYSTEM_SCHEMAS}"
)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table.

    Attributes:
        name: The name as declared.
        spanner_type: The GoogleSQL type as INFORMATION_SCHEMA spells it (``STRING(100)``,
            ``ARRAY<INT64>``).
        generated: A generated column, which a mutation may not set.
    """

    name: str
    spanner_type: str
    generated: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    """A secondary index (or a foreign key's backing index) of a table.

    Attributes:
        name: The index name.
        columns: The lower-cased names of its key and STORING columns.
    """

    name: str
    columns: frozenset[str]

    @property
    def write_cost(self) -> int:
        """What one write changing this index counts: its columns, plus the old entry."""
        return len(self.columns) + 1


@dataclass(frozen=True)
class TableInfo:
    """What the writer knows of one table.

    Attributes:
        name: The table name as declared (``schema.table`` in a named schema).
        columns: The columns by lower-cased name (Spanner names are case-insensitive).
        key: The primary key columns, in key order.
        indexes: The secondary indexes, foreign-key backing indexes included.
    """

    name: str
    columns: dict[str, Column]
    key: tuple[Column, ...] = ()
    indexes: tuple[Index, ...] = ()

    def column(self, name: str) -> Column | None:
        return self.columns.get(name.lower()) if isinstance(name, str) else None

    def write_cost(self, operation: str, columns: Iterable[str]) -> int:
        """Mutations one row of a write counts: its columns plus the index entries it touches.

        Args:
            operation: ``insert``, ``update``, ``insert_or_update`` or ``replace``.
            columns: The columns the write sets.
        """
        names = {c.lower() for c in columns}
        cost = len(names)
        for index in self.indexes:
            if operation != UPDATE or not index.columns.isdisjoint(names):
                cost += index.write_cost
        return cost

    @property
    def delete_cost(self) -> int:
        """Mutations one deleted key (or range, counted as one row) counts."""
        return 1 + len(self.indexes)


@dataclass(frozen=True)
class DatabaseSchema:
    """The tables of a database, by lower-cased name."""

    tables: dict[str, TableInfo] = field(default_factory=dict)

    def table(self, name: str) -> TableInfo | None:
        return self.tables.get(name.lower()) if isinstance(name, str) else None

    def table_names(self) -> list[str]:
        return sorted(t.name for t in self.tables.values())


def _qualified(schema: Any, table: Any) -> str:
    return f"{schema}.{table}" if schema else str(table)


def read_schema(query: Callable[[str], list[list[Any]]]) -> DatabaseSchema:
    """Read every table's columns, primary key and secondary indexes.

    Args:
        query: Runs one GoogleSQL statement and returns its rows as lists of Python values
            (strings, booleans, ints or None).
    """
    declared = {_qualified(s, t).lower(): _qualified(s, t) for s, t, *_ in query(TABLES_SQL) if t}
    columns: dict[str, dict[str, Column]] = {name: {} for name in declared}
    for schema, table, name, spanner_type, generated in query(COLUMNS_SQL):
        key = _qualified(schema, table).lower()
        if key in columns:
            columns[key][str(name).lower()] = Column(
                str(name), str(spanner_type or ""), str(generated or "").upper() == "ALWAYS"
            )
    keys: dict[str, list[tuple[int, str]]] = {}
    indexes: dict[str, dict[str, set[str]]] = {}
    for schema, table, index, index_type, name, position in query(INDEX_COLUMNS_SQL):
        key = _qualified(schema, table).lower()
        if key not in columns:
            continue
        if str(index_type).upper() == "PRIMARY_KEY":
            keys.setdefault(key, []).append((int(position or 0), str(name).lower()))
        else:
            indexes.setdefault(key, {}).setdefault(str(index), set()).add(str(name).lower())
    tables: dict[str, TableInfo] = {}
    for key, name in declared.items():
        cols = columns[key]
        pk = tuple(cols[c] for _, c in sorted(keys.get(key, [])) if c in cols)
        idx = tuple(
            Index(index_name, frozenset(index_columns))
            for index_name, index_columns in sorted(indexes.get(key, {}).items())
        )
        tables[key] = TableInfo(name, cols, pk, idx)
    return DatabaseSchema(tables)
