"""gcp-spanner's adapter: upserts into the template's table, and with a primary key the
changelog's deletes as key deletes."""

from __future__ import annotations

from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.spanner import Mutation
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, DeletedRow, TableInfo
from pyflink_gcp.table.spanner import build_sink

COLUMNS = (
    Column("region", {"root": "VARCHAR", "nullable": False, "sql": "STRING"}),
    Column("id", {"root": "BIGINT", "nullable": False, "sql": "BIGINT"}),
    Column("total", {"root": "BIGINT", "nullable": True, "sql": "BIGINT"}),
)
RAW = {"project": "p", "instance": "inst", "database": "db", "table": "Totals_{region}"}


def _serializer(table: TableInfo):
    sink = build_sink(parse("gcp-spanner", RAW, table.names), table)
    assert str(sink.database) == "projects/p/instances/inst/databases/db"
    return sink._sink_config().serializer


def test_rows_are_upserts_into_their_template_table():
    serialize = _serializer(TableInfo("totals", COLUMNS))
    row = {"region": "eu", "id": 1, "total": 5}
    assert serialize(row, None) == Mutation.insert_or_update("Totals_eu", row)
    unroutable = serialize({**row, "region": None}, None)
    assert isinstance(unroutable, UnroutableRecord)
    assert unroutable.payload == b'{"region":null,"id":1,"total":5}'
    assert "placeholder {region}: the value is missing (None)" in unroutable.reason


def test_a_deleted_row_deletes_its_key():
    serialize = _serializer(TableInfo("totals", COLUMNS, primary_key=("region", "id")))
    deleted = DeletedRow(region="eu", id=1, total=5)
    assert serialize(deleted, None) == Mutation.delete("Totals_eu", ("eu", 1))
