"""gcp-bigtable's adapter: columns as cells (ROW columns as families), the two value formats,
the cell timestamp column, created families, and rows without a table or key unroutable."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pyflink_gcp.bigtable import SetCell, TableDestination
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.table.bigtable import build_sink
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, TableInfo


def t(root: str, **more) -> dict:
    return {"root": root, "nullable": True, "sql": root, **more}


TABLE = TableInfo(
    "cells",
    (
        Column("id", t("VARCHAR")),
        Column("region", t("VARCHAR")),
        Column("n", t("BIGINT")),
        Column("ratio", t("DOUBLE")),
        Column("ok", t("BOOLEAN")),
        Column("price", t("DECIMAL", precision=10, scale=2)),
        Column("raw", t("VARBINARY")),
        Column("tags", t("ARRAY", element=t("VARCHAR"))),
        Column("meta", t("ROW", fields=[{"name": "src", "type": t("VARCHAR")}])),
        Column("at", t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6), micros=True),
    ),
)
RECORD = {
    "id": "k1",
    "region": "eu",
    "n": 7,
    "ratio": 0.5,
    "ok": True,
    "price": Decimal("1.50"),
    "raw": b"\x00\x01",
    "tags": ["a", "b"],
    "meta": {"src": "web"},
    "at": datetime(2024, 3, 1, 12, 0, 0, 123456),
}


def _sink(**options: str):
    raw = {
        "project": "p",
        "instance": "inst",
        "table": "t_{region}",
        "row-key": "id",
        "column-family": "cf",
        **options,
    }
    return build_sink(parse("gcp-bigtable", raw, TABLE.names), TABLE)


def _cells(entry) -> dict:
    return {(m.family, m.qualifier): (m.new_value, m.timestamp_micros) for m in entry.mutations}


def test_text_cells_a_family_per_row_column_and_the_timestamp_column_in_milliseconds():
    config = _sink(**{"timestamp.column": "at"})._sink_config()
    assert config.resolver.resolve(RECORD, None) == TableDestination.of("p", "inst", "t_eu")
    entry = config.serializer(RECORD, None)
    assert entry.row_key == b"k1"
    stamp = int(datetime(2024, 3, 1, 12, 0, 0, 123000, tzinfo=UTC).timestamp()) * 10**6 + 123000
    assert _cells(entry) == {
        ("cf", b"region"): (b"eu", stamp),
        ("cf", b"n"): (b"7", stamp),
        ("cf", b"ratio"): (b"0.5", stamp),
        ("cf", b"ok"): (b"true", stamp),
        ("cf", b"price"): (b"1.50", stamp),
        ("cf", b"raw"): (b"\x00\x01", stamp),
        ("cf", b"tags"): (b'["a","b"]', stamp),
        ("meta", b"src"): (b"web", stamp),
    }


def test_binary_values_and_nulls_write_no_cell():
    entry = (
        _sink(**{"value.format": "binary"})
        ._sink_config()
        .serializer({**RECORD, "region": None, "meta": None}, None)
    )
    cells = _cells(entry)
    assert cells[("cf", b"n")][0] == struct.pack(">q", 7)
    assert cells[("cf", b"ratio")][0] == struct.pack(">d", 0.5)
    assert cells[("cf", b"ok")][0] == b"\x01"
    assert cells[("cf", b"at")][0] == b"2024-03-01T12:00:00.123456"  # not a timestamp column
    assert ("cf", b"region") not in cells and ("meta", b"src") not in cells
    assert all(isinstance(m, SetCell) for m in entry.mutations)


def test_created_tables_get_the_family_and_one_per_row_column():
    factory = _sink(**{"create-disposition": "create-if-needed"}).writer_factory
    assert dict(factory.create_options.column_families) == {"cf": None, "meta": None}


def test_rows_without_a_table_or_a_row_key_are_unroutable():
    config = _sink()._sink_config()
    no_table = config.resolver.resolve({**RECORD, "region": None}, None)
    assert isinstance(no_table, UnroutableRecord)
    assert "placeholder {region}: the value is missing (None)" in no_table.reason
    # The row key is the serializer's: it makes the row unroutable after the table resolved.
    no_key = config.serializer({**RECORD, "id": None}, None)
    assert isinstance(no_key, UnroutableRecord)
    assert no_key.reason == "row key column id is NULL"


def test_the_timestamp_column_must_be_a_timestamp():
    with pytest.raises(ConfigurationError, match="it must be a TIMESTAMP or TIMESTAMP_LTZ"):
        _sink(**{"timestamp.column": "n"})
