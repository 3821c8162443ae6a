"""Tables written by the serializer's declared schema without asking them first.

After the first table of a dataset (which is looked up, and gives the dataset's location), a
sink whose serializer declares a schema sends a new table's first request at once, encoded by
that schema. What the table refuses of it is checked against the table's own layout: the
rows land as the table's columns say, or fail as they would have if the table had been asked.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp import FailureHandler
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    TableSchema,
    UnknownFields,
)
from pyflink_gcp.core import CreateDisposition, DestinationNotFoundError
from tests.integration.bigquery.support import make_dataset, make_table, query, table_names
from tests.integration.bigquery.test_writer import ByTable
from tests.support.writers import open_writer

pytestmark = pytest.mark.integration

DECLARED = TableSchema.of(
    [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("name", "STRING")]
)


def _row(record: dict[str, Any], context: Any) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "table"}


def _writer(project: str, dataset: str, **settings: Any) -> Any:
    first_exists = settings.pop("first_exists", True)
    sink = (
        BigQuerySink.builder()
        .set_destination_resolver(ByTable(project, dataset))
        .set_serializer(BigQuerySerializer.of(_row, schema=settings.pop("schema", DECLARED)))
        .set_create_disposition(settings.pop("disposition", CreateDisposition.CREATE_IF_NEEDED))
        .set_failure_handler(FailureHandler.fail_job())
        .set_writer_options(settings.pop("options", BigQueryWriterOptions()))
        .build()
    )
    assert not settings, settings
    writer = open_writer(sink)
    # The dataset's first table is asked, and its stream answers: the dataset's tables exist.
    if first_exists:
        make_table(project, dataset, "first", list(DECLARED.fields))
    writer.write({"table": "first", "id": 0, "name": "n0"})
    writer.flush()
    return writer


def _lookups(writer: Any) -> Any:
    return writer._factory.stream_lookups


def _ids(project: str, dataset: str, table: str, columns: str = "id") -> list[dict[str, Any]]:
    return sorted(
        query(project, f"SELECT {columns} FROM `{project}.{dataset}.{table}`"),
        key=lambda r: r["id"],
    )


def test_tables_of_the_declared_schema_are_written_without_a_lookup(project: str) -> None:
    dataset = make_dataset(project)
    for table in ("a", "b"):
        make_table(project, dataset, table, list(DECLARED.fields))
    writer = _writer(project, dataset)
    for i in range(1, 7):
        writer.write({"table": "ab"[i % 2], "id": i, "name": f"n{i}"})
    writer.flush()
    lookups = _lookups(writer)
    counts = (lookups.answered, lookups.handed_over, lookups.assumed, lookups.checked_after)
    gauges = {name: read() for name, read in writer._factory.gauges().items()}
    writer.close()

    assert counts == (1, 0, 2, 0)  # first: its stream answered; a, b: never asked
    assert (gauges["declaredSchemaTables"], gauges["declaredSchemaChecks"]) == (2, 0)
    assert [r["id"] for r in _ids(project, dataset, "a")] == [2, 4, 6]
    assert [r["id"] for r in _ids(project, dataset, "b")] == [1, 3, 5]


def test_a_table_with_a_column_the_declared_schema_lacks_gets_it(project: str) -> None:
    dataset = make_dataset(project)
    make_table(project, dataset, "wide", [*DECLARED.fields, SchemaField("extra", "STRING")])
    writer = _writer(project, dataset)
    for i in range(1, 4):
        writer.write({"table": "wide", "id": i, "name": f"n{i}", "extra": f"x{i}"})
    writer.flush()
    lookups = _lookups(writer)
    counts = (lookups.assumed, lookups.checked_after)
    checks = writer._factory.gauges()["declaredSchemaChecks"]()
    writer.close()

    assert counts == (1, 1) and checks == 1
    assert _ids(project, dataset, "wide", "id, extra") == [
        {"id": i, "extra": f"x{i}"} for i in range(1, 4)
    ]


def test_a_table_lacking_a_declared_column_takes_the_rows_without_it(project: str) -> None:
    dataset = make_dataset(project)
    make_table(project, dataset, "narrow", [SchemaField("id", "INT64", mode="REQUIRED")])
    writer = _writer(project, dataset)
    for i in range(1, 4):
        writer.write({"table": "narrow", "id": i})
    writer.flush()
    lookups = _lookups(writer)
    counts = (lookups.assumed, lookups.checked_after)
    writer.close()

    # The emulator takes a writer schema with a column its table lacks (BigQuery refuses it,
    # and the sender asks the table: tests/unit/bigquery/test_layout_checks.py).
    assert counts == (1, 0)
    assert [r["id"] for r in _ids(project, dataset, "narrow")] == [1, 2, 3]


def test_a_missing_table_is_created_when_its_first_append_is_refused(project: str) -> None:
    dataset = make_dataset(project)
    writer = _writer(project, dataset)
    for i in range(1, 4):
        writer.write({"table": "fresh", "id": i, "name": f"n{i}"})
    writer.flush()
    # Tables of this dataset are made on demand: the next new one is asked first.
    writer.write({"table": "later", "id": 4, "name": "n4"})
    writer.flush()
    lookups = _lookups(writer)
    counts = (lookups.assumed, lookups.checked_after, lookups.handed_over)
    writer.close()

    assert counts == (1, 1, 2)  # fresh: assumed, refused, created; later: asked, created
    assert table_names(project, dataset) == ["first", "fresh", "later"]
    assert [r["id"] for r in _ids(project, dataset, "fresh")] == [1, 2, 3]
    assert [r["id"] for r in _ids(project, dataset, "later")] == [4]


def test_a_dataset_whose_tables_are_made_on_demand_is_never_assumed(project: str) -> None:
    dataset = make_dataset(project)
    writer = _writer(project, dataset, first_exists=False)
    for i in range(1, 4):
        writer.write({"table": f"t{i}", "id": i, "name": f"n{i}"})
    writer.flush()
    assumed = _lookups(writer).assumed
    writer.close()

    assert assumed == 0
    assert table_names(project, dataset) == ["first", "t1", "t2", "t3"]


def test_a_missing_table_under_create_never_names_the_table(project: str) -> None:
    dataset = make_dataset(project)
    writer = _writer(project, dataset, disposition=CreateDisposition.CREATE_NEVER)
    writer.write({"table": "absent", "id": 1, "name": "n1"})
    with pytest.raises(DestinationNotFoundError, match="absent"):
        writer.flush()
    writer.close()


def test_ignore_unknown_fields_always_asks_the_table(project: str) -> None:
    dataset = make_dataset(project)
    make_table(project, dataset, "wide", [*DECLARED.fields, SchemaField("extra", "STRING")])
    writer = _writer(
        project, dataset, options=BigQueryWriterOptions(unknown_fields=UnknownFields.IGNORE)
    )
    writer.write({"table": "wide", "id": 1, "name": "n1", "extra": "x1"})
    writer.flush()
    assumed = _lookups(writer).assumed
    writer.close()

    assert assumed == 0
    assert _ids(project, dataset, "wide", "id, extra") == [{"id": 1, "extra": "x1"}]


def test_change_data_capture_rows_are_encoded_by_the_tables_own_layout(project: str) -> None:
    # Change-data-capture rows are encoded as they come, before any request could check the
    # declared schema: the table is asked first, and its extra column is written.
    dataset = make_dataset(project)
    make_table(project, dataset, "changes", [*DECLARED.fields, SchemaField("extra", "STRING")])
    # With a declared key, a layout from the table's stream would not ask the table's REST
    # metadata: an assumed one must.
    writer = _writer(project, dataset, schema=TableSchema.of(DECLARED.fields, primary_key=["id"]))
    for i in range(1, 4):
        writer.write({"table": "changes", "id": i, "extra": f"x{i}", "_CHANGE_TYPE": "UPSERT"})
    writer.flush()
    assumed = _lookups(writer).assumed
    writer.close()

    assert assumed == 1
    assert _ids(project, dataset, "changes", "id, extra") == [
        {"id": i, "extra": f"x{i}"} for i in range(1, 4)
    ]
