"""The schema the writer reads (INFORMATION_SCHEMA rows) and Spanner's mutation count."""

from __future__ import annotations

import pyflink_gcp.spanner
from pyflink_gcp.spanner.schema import Column, Index, TableInfo
from tests.unit.spanner.fakes import schema


def test_schema_reads_tables_keys_indexes_and_skips_views() -> None:
    s = schema()
    assert s.table_names() == ["Audit", "Events", "sales.Orders"]
    events = s.table("EVENTS")
    assert events is not None and s.table("SomeView") is None
    assert [c.name for c in events.key] == ["id"]
    assert events.indexes == (
        Index("ByKind", frozenset({"kind", "score"})),
        Index("ByN", frozenset({"n"})),
    )
    assert events.column("Kind_Upper") == Column("kind_upper", "STRING(16)", True)
    orders = s.table("sales.orders")
    assert orders is not None and [c.name for c in orders.key] == ["region", "num"]


def test_counting_rule_columns_plus_touched_indexes() -> None:
    events = schema().table("Events")
    assert events is not None
    # Inserts may create a row: every index changes (ByKind: 2 columns + 1, ByN: 1 + 1).
    for op in ("insert", "insert_or_update", "replace"):
        assert events.write_cost(op, ["id", "kind"]) == 2 + 3 + 2
    # Updates change only the indexes holding a column they set.
    assert events.write_cost("update", ["id", "score"]) == 2 + 3
    assert events.write_cost("update", ["ID", "N"]) == 2 + 2
    assert events.write_cost("update", ["id"]) == 1
    # A delete counts one, plus one per secondary index (per deleted row).
    assert events.delete_cost == 3
    audit = schema().table("Audit")
    assert audit is not None
    assert (audit.write_cost("insert", ["id", "who"]), audit.delete_cost) == (2, 1)


def test_table_info_is_internal() -> None:
    # BigQuery exports a public TableSchema; Spanner's table description is the writer's own.
    tables = schema().tables
    assert all(type(t) is TableInfo for t in tables.values())
    exported = set(pyflink_gcp.spanner.__all__)
    assert not {"TableInfo", "TableSchema", "DatabaseSchema"} & exported
    assert not hasattr(pyflink_gcp.spanner, "TableSchema")
