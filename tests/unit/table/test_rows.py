"""Rows as the Java sink sends them, turned into the dicts the writers take."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pyflink.common import Row

from pyflink_gcp.table.rows import Column, RowConverter, TableInfo


def _type(root: str, **more) -> dict:
    return {"root": root, "nullable": True, "sql": root, **more}


SCHEMA = json.dumps(
    {
        "sink_name": "orders",
        "columns": [
            {"name": "id", "type": _type("BIGINT"), "micros": False},
            {
                "name": "at",
                "type": _type("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6),
                "micros": True,
            },
            {
                "name": "at_ltz",
                "type": _type("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=9),
                "micros": True,
            },
            {
                "name": "info",
                "type": _type("ROW", fields=[{"name": "a", "type": _type("INTEGER")}]),
                "micros": False,
            },
            {
                "name": "infos",
                "type": _type("ARRAY", element=_type("ROW", fields=[])),
                "micros": False,
            },
        ],
    }
)


def test_table_info_reads_the_java_schema():
    table = TableInfo.from_json(SCHEMA)
    assert table.sink_name == "orders"
    assert table.names == ("id", "at", "at_ltz", "info", "infos")
    assert table.column("at") == Column(
        "at", _type("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6), True
    )


def test_micros_become_datetimes_naive_or_utc_and_nested_rows_dicts():
    convert = RowConverter(TableInfo.from_json(SCHEMA).columns)
    micros = 1_709_294_400_123_456  # 2024-03-01 12:00:00.123456
    row = Row(id=1, at=micros, at_ltz=-1, info=Row(a=2), infos=[Row(b=3), None])
    assert convert(row) == {
        "id": 1,
        "at": datetime(2024, 3, 1, 12, 0, 0, 123456),
        "at_ltz": datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "info": {"a": 2},
        "infos": [{"b": 3}, None],
    }
    assert convert(Row(id=None, at=None, at_ltz=None, info=None, infos=None)) == dict.fromkeys(
        ("id", "at", "at_ltz", "info", "infos")
    )
