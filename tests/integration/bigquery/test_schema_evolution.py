"""Schema evolution and unknown fields against the emulator, with the writer driven in this
process (no Flink): a v2 serializer's new columns added to v1's tables before its rows, one
effective update when two subtasks race, impossible changes named, and the three policies for
row keys that are no column."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp import FailureHandler
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    SchemaUpdate,
    SchemaUpdateError,
    TableSchema,
    UnknownFields,
)
from pyflink_gcp.core import RecordSchemaError
from tests.integration.bigquery.support import ByRegion, bq_client, make_dataset, query
from tests.support.dead_letters import MemoryDeadLetterQueue
from tests.support.writers import open_writer

pytestmark = pytest.mark.integration

V1 = TableSchema.of(
    [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("region", "STRING", mode="REQUIRED")]
)
V2 = TableSchema.of(
    [
        SchemaField("id", "INT64", mode="REQUIRED"),
        SchemaField("region", "STRING"),
        SchemaField("amount", "FLOAT64"),
        SchemaField("tags", "STRING", mode="REPEATED"),
    ]
)


def sink(
    project: str, dataset: str, schema: TableSchema, *, handler: Any = None, **options: Any
) -> BigQuerySink:
    return (
        BigQuerySink.builder()
        .set_destination_resolver(ByRegion(project, dataset))
        .set_serializer(BigQuerySerializer.of(schema=schema))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(handler or FailureHandler.fail_job())
        .set_writer_options(BigQueryWriterOptions(**options))
        .build()
    )


def columns(project: str, dataset: str, table: str) -> list[tuple[str, str, str]]:
    client = bq_client(project)
    try:
        fields = client.get_table(f"{project}.{dataset}.{table}").schema
    finally:
        client.close()
    legacy = {"INTEGER": "INT64", "FLOAT": "FLOAT64"}  # BigQuery answers either spelling
    return [(f.name, legacy.get(f.field_type, f.field_type), f.mode) for f in fields]


def test_a_v2_serializer_adds_its_columns_once_and_writes_every_row(project: str) -> None:
    dataset = make_dataset(project, "evolve")
    v1 = open_writer(sink(project, dataset, V1))
    for i in range(20):
        v1.write({"id": i, "region": "eu"})
    v1.flush()
    v1.close()

    # Two subtasks of v2 open the same table at once: one of them updates it.
    # (A sink each: a subtask's writer factory is its own, as on the workers.)
    writers = [
        open_writer(sink(project, dataset, V2, schema_update=SchemaUpdate.ADD_COLUMNS), i, 2)
        for i in (0, 1)
    ]
    for i in range(20, 60):
        writers[i % 2].write(
            {"id": i, "region": "eu" if i % 3 else "us", "amount": i / 2, "tags": ["a", str(i)]}
        )
    for writer in writers:
        writer.flush()
    updates = sum(w._factory.catalog.schema_updates for w in writers)
    for writer in writers:
        writer.close()

    assert updates == 1  # orders_eu; orders_us was created with V2's columns
    assert columns(project, dataset, "orders_eu") == [
        ("id", "INT64", "REQUIRED"),
        ("region", "STRING", "REQUIRED"),  # ADD_COLUMNS does not relax
        ("amount", "FLOAT64", "NULLABLE"),
        ("tags", "STRING", "REPEATED"),
    ]
    rows = query(
        project,
        f"SELECT id, amount, tags FROM `{project}.{dataset}.orders_eu` UNION ALL "
        f"SELECT id, amount, tags FROM `{project}.{dataset}.orders_us`",
    )
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == list(range(60))
    assert all(by_id[i]["amount"] is None for i in range(20))
    assert all(by_id[i]["amount"] == i / 2 for i in range(20, 60))
    assert all(list(by_id[i]["tags"]) == ["a", str(i)] for i in range(20, 60))


def test_relax_makes_a_required_column_nullable(project: str) -> None:
    dataset = make_dataset(project, "relax")
    v1 = open_writer(sink(project, dataset, V1))
    v1.write({"id": 1, "region": "eu"})
    v1.flush()
    v1.close()
    v2 = open_writer(sink(project, dataset, V2, schema_update=SchemaUpdate.ADD_AND_RELAX_COLUMNS))
    v2.write({"id": 2, "region": "eu", "amount": 1.5})
    v2.flush()
    v2.close()
    assert columns(project, dataset, "orders_eu")[1] == ("region", "STRING", "NULLABLE")


def test_a_type_change_fails_naming_the_table_and_column(project: str) -> None:
    dataset = make_dataset(project, "retype")
    v1 = open_writer(sink(project, dataset, V1))
    v1.write({"id": 1, "region": "eu"})
    v1.flush()
    v1.close()
    retyped = TableSchema.of([SchemaField("id", "STRING", mode="REQUIRED")])
    writer = open_writer(sink(project, dataset, retyped, schema_update=SchemaUpdate.ADD_COLUMNS))
    writer.write({"id": "one", "region": "eu"})
    with pytest.raises(SchemaUpdateError, match=r"orders_eu: column id is INT64 in the table"):
        writer.flush()
    writer.close()


def test_without_schema_update_a_new_column_is_an_unknown_field(project: str) -> None:
    dataset = make_dataset(project, "noupdate")
    v1 = open_writer(sink(project, dataset, V1))
    v1.write({"id": 1, "region": "eu"})
    v1.flush()
    v1.close()
    # log_and_drop would drop it; UnknownFields.FAIL (the default) ends the job all the same.
    writer = open_writer(sink(project, dataset, V2, handler=FailureHandler.log_and_drop()))
    writer.write({"id": 2, "region": "eu", "amount": 1.5})
    with pytest.raises(RecordSchemaError, match=r"orders_eu.*no column amount.*ADD_COLUMNS"):
        writer.flush()
    writer.close()


@pytest.mark.parametrize("policy", [UnknownFields.IGNORE, UnknownFields.FAILURE_HANDLER])
def test_unknown_keys_are_dropped_or_handed_to_the_failure_handler(
    project: str, policy: UnknownFields
) -> None:
    dataset = make_dataset(project, "unknown")
    dlq = MemoryDeadLetterQueue()
    writer = open_writer(
        sink(
            project,
            dataset,
            V1,
            handler=FailureHandler.send_to_dead_letter_queue(dlq),
            unknown_fields=policy,
        )
    )
    for i in range(10):
        writer.write({"id": i, "region": "eu", **({"debug": True} if i % 2 else {})})
    writer.flush()
    writer.close()
    ids = sorted(r["id"] for r in query(project, f"SELECT id FROM `{project}.{dataset}.orders_eu`"))
    if policy is UnknownFields.IGNORE:
        assert ids == list(range(10)) and not dlq.sent
    else:
        assert ids == [0, 2, 4, 6, 8]
        assert sorted(json.loads(f.payload)["id"] for f in dlq.sent) == [1, 3, 5, 7, 9]
        assert all("no column debug" in f.reason for f in dlq.sent)
