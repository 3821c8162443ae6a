"""The staged file writers of each FileFormat: files their readers read back with the table's
types, rows that do not fit rejected before anything of them is written."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.file_formats import (
    AvroPartWriter,
    JsonPartWriter,
    ParquetPartWriter,
    PartWriter,
    avro_schema,
    load_job_config,
    part_writer_type,
)
from pyflink_gcp.bigquery.options import FileFormat
from pyflink_gcp.bigquery.rows import ColumnTree
from pyflink_gcp.bigquery.values import RowError

SCHEMA = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("name", "STRING"),
    SchemaField("score", "FLOAT64"),
    SchemaField("ok", "BOOL"),
    SchemaField("raw", "BYTES"),
    SchemaField("at", "TIMESTAMP"),
    SchemaField("day", "DATE"),
    SchemaField("civil", "DATETIME"),
    SchemaField("clock", "TIME"),
    SchemaField("amount", "NUMERIC"),
    SchemaField("tags", "STRING", mode="REPEATED"),
    SchemaField(
        "address",
        "RECORD",
        fields=[SchemaField("city", "STRING", mode="REQUIRED"), SchemaField("zip", "STRING")],
    ),
]
AT = datetime(2026, 12, 1, 10, 30, 15, 123456, tzinfo=UTC)
FULL = {
    "id": 1,
    "name": "one",
    "score": 1.5,
    "ok": True,
    "raw": b"\x00\x01",
    "at": AT,
    "day": date(2026, 12, 1),
    "civil": datetime(2026, 12, 1, 8, 0, 0, 250000),
    "clock": time(23, 59, 58, 999999),
    "amount": "12.3456789015",  # rounded to 9 places
    "tags": ["a", "b"],
    "address": {"city": "Lyon", "zip": "69001"},
}
SPARSE = {"id": 2}
AT_MICROS = 1_796_121_015_123_456  # AT in epoch microseconds
AT_MILLIS = AT_MICROS // 1_000
WRITERS = [JsonPartWriter, AvroPartWriter, ParquetPartWriter]


def write(kind: type[PartWriter], path: Path, rows: list[dict[str, Any]]) -> PartWriter:
    writer = kind(str(path), SCHEMA, False, 1 << 20)
    for row in rows:
        writer.write(row)
    writer.finish()
    return writer


def read(kind: type[PartWriter], path: Path) -> list[dict[str, Any]]:
    if kind is JsonPartWriter:
        return [json.loads(line) for line in path.read_text().splitlines()]
    if kind is AvroPartWriter:
        with open(path, "rb") as f:
            return list(fastavro.reader(f))
    return pq.read_table(path).to_pylist()


def test_avro_files_carry_the_table_types_and_every_column(tmp_path: Path) -> None:
    path = tmp_path / "f.avro"
    write(AvroPartWriter, path, [FULL, SPARSE])
    full, sparse = read(AvroPartWriter, path)
    assert full["at"] == AT and full["day"] == date(2026, 12, 1)
    assert full["clock"] == time(23, 59, 58, 999999)
    assert full["civil"] == "2026-12-01 08:00:00.250000"
    assert full["amount"] == Decimal("12.345678902")  # half away from zero, at 9 places
    assert full["raw"] == b"\x00\x01" and full["tags"] == ["a", "b"]
    assert full["address"] == {"city": "Lyon", "zip": "69001"}
    # Missing columns are present as nulls (or empty lists), in schema order.
    assert list(sparse) == [f.name for f in SCHEMA]
    assert sparse["name"] is None and sparse["tags"] == [] and sparse["address"] is None


def test_parquet_files_carry_the_table_types_in_schema_order(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write(ParquetPartWriter, path, [FULL, SPARSE])
    table = pq.read_table(path)
    assert table.schema.names == [f.name for f in SCHEMA]
    assert str(table.schema.field("at").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("civil").type) == "timestamp[us]"
    assert not table.schema.field("id").nullable
    full, sparse = table.to_pylist()
    assert full["at"] == AT and full["civil"] == datetime(2026, 12, 1, 8, 0, 0, 250000)
    assert full["clock"] == time(23, 59, 58, 999999)
    assert full["amount"] == Decimal("12.345678902")
    assert full["address"] == {"city": "Lyon", "zip": "69001"}
    assert sparse["name"] is None and sparse["tags"] == [] and sparse["address"] is None


def test_json_lines_use_the_loader_forms(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write(JsonPartWriter, path, [FULL, SPARSE])
    full, sparse = read(JsonPartWriter, path)
    assert full["at"] == "2026-12-01T10:30:15.123456Z" and full["raw"] == "AAE="
    assert sparse == {"id": 2}


@pytest.mark.parametrize("kind", WRITERS)
@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"name": "no id"}, "column id is REQUIRED and has no value"),
        ({"id": 3, "address": {"zip": "1"}}, "column address.city is REQUIRED"),
        ({"id": "three"}, "expected an INT64"),
        ({"id": 3, "amount": 10**30}, "more than 29 digits before the point"),
        ({"id": 3, "nope": 1}, "no column nope"),
        ({"id": 3, "at": AT_MILLIS}, f"column at: TIMESTAMP {AT_MILLIS} looks like epoch milli"),
        (
            {"id": 3, "at": AT_MILLIS // 1_000},
            "column at: TIMESTAMP 1796121015 looks like epoch sec",
        ),
        ({"id": 3, "at": AT_MICROS * 1_000}, "column at: TIMESTAMP .* looks like epoch nanosec"),
    ],
)
def test_a_row_that_does_not_fit_is_rejected_and_the_file_stays_readable(
    kind: type[PartWriter], row: dict[str, Any], message: str, tmp_path: Path
) -> None:
    path = tmp_path / f"f{kind.extension}"
    writer = kind(str(path), SCHEMA, False, 1 << 20)
    writer.write(SPARSE)
    if kind is JsonPartWriter and "digits" in message:
        writer.write(row)  # JSON carries NUMERIC as text: BigQuery's loader checks it
    else:
        with pytest.raises(RowError, match=message):
            writer.write(row)
    writer.write({"id": 4})
    writer.finish()
    written = [2, 3, 4] if writer.rows == 3 else [2, 4]
    assert [r["id"] for r in read(kind, path)] == written


@pytest.mark.parametrize("kind", WRITERS)
def test_an_int_timestamp_is_epoch_microseconds_in_every_format(
    kind: type[PartWriter], tmp_path: Path
) -> None:
    path = tmp_path / f"f{kind.extension}"
    write(kind, path, [{"id": 1, "at": AT_MICROS}, {"id": 2, "at": 0}])
    at = [r["at"] for r in read(kind, path)]
    if kind is JsonPartWriter:
        assert at == ["2026-12-01T10:30:15.123456Z", "1970-01-01T00:00:00.000000Z"]
    else:
        assert at == [AT, datetime(1970, 1, 1, tzinfo=UTC)]


def test_a_value_fastavro_refuses_leaves_nothing_of_its_row_in_the_block(tmp_path: Path) -> None:
    class Unchecked(AvroPartWriter):
        # A converter that lets a wrong type through: the second column fails after the
        # first was already encoded into the block.
        converters = {**AvroPartWriter.converters, "INT64": lambda value: value}

    path = tmp_path / "f.avro"
    fields = [SchemaField("a", "INT64"), SchemaField("n", "INT64")]
    writer = Unchecked(str(path), fields, False, 1 << 20)
    writer.write({"a": 1, "n": 1})
    with pytest.raises(RowError, match="as Avro"):
        writer.write({"a": 2, "n": "two"})
    writer.write({"a": 3, "n": 3})
    writer.finish()
    assert read(AvroPartWriter, path) == [{"a": 1, "n": 1}, {"a": 3, "n": 3}]


def test_a_parquet_file_estimates_its_size_and_writes_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    writer = ParquetPartWriter(str(path), [SchemaField("n", "INT64")], False, 4_096)
    for n in range(5_000):
        writer.write({"n": n})
    estimated = writer.size
    writer.finish()
    metadata = pq.ParquetFile(path).metadata
    # Held rows are written a group at a time once they would fill the file.
    assert metadata.num_rows == 5_000 and metadata.num_row_groups > 1
    assert 0.5 < estimated / path.stat().st_size < 2


@pytest.mark.parametrize(
    ("file_format", "source_format"),
    [
        (FileFormat.NEWLINE_DELIMITED_JSON, "NEWLINE_DELIMITED_JSON"),
        (FileFormat.AVRO, "AVRO"),
        (FileFormat.PARQUET, "PARQUET"),
    ],
)
def test_each_format_loads_with_its_source_format(
    file_format: FileFormat, source_format: str
) -> None:
    config = load_job_config(file_format)
    assert config.source_format == source_format
    assert config.write_disposition == "WRITE_APPEND"
    assert config.create_disposition == "CREATE_NEVER"
    if file_format is FileFormat.AVRO:
        assert config.use_avro_logical_types is True
    if file_format is FileFormat.PARQUET:
        assert config.parquet_options.enable_list_inference is True
    assert part_writer_type(file_format).extension in (".json", ".avro", ".parquet")


def test_nested_records_get_unique_avro_names() -> None:
    fields = [
        SchemaField(
            "a", "RECORD", fields=[SchemaField("b", "RECORD", fields=[SchemaField("c", "INT64")])]
        ),
        SchemaField("b", "RECORD", fields=[SchemaField("c", "INT64")]),
    ]
    schema = avro_schema(ColumnTree(fields, {"INT64": int}).columns)
    fastavro.parse_schema(schema)  # raises on a repeated record name


@pytest.mark.parametrize("kind", WRITERS)
def test_a_finished_file_reports_its_size_on_disk(kind: type[PartWriter], tmp_path: Path) -> None:
    path = tmp_path / f"f{kind.extension}"
    writer = write(kind, path, [FULL, SPARSE] * 50)
    assert writer.size == path.stat().st_size and writer.rows == 100
