"""A table spec per destination against the emulator: under CREATE_IF_NEEDED the sink's table
catalog creates each table with the partitioning, clustering, labels, description and KMS key
its serializer's ``schema(destination)`` gives it, and the tables read back with them.

What the sink sends is checked in full (each create request, as the REST client serialized
it); every setting reads back as BigQuery keeps it (the emulator launcher keeps what bqemulator
alone dropped: range partitioning, the partition filter and the KMS key), but the primary key,
see :data:`EMULATOR_DROPS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud.bigquery import (
    PartitionRange,
    RangePartitioning,
    SchemaField,
    TimePartitioning,
)

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    CreateDisposition,
    TableDestination,
    TableSchema,
)
from pyflink_gcp.bigquery.tables import TableCatalog, open_metadata
from tests.integration.bigquery.support import bq_client, make_dataset

pytestmark = pytest.mark.integration

KMS = "projects/test-project/locations/us/keyRings/sink/cryptoKeys/tables"
WEEK_MS = 7 * 86_400_000
EVENTS = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("region", "STRING"),
    SchemaField("user_id", "STRING"),
    SchemaField("ts", "TIMESTAMP", mode="REQUIRED"),
]
ACCOUNTS = [SchemaField("account_id", "INT64", mode="REQUIRED"), SchemaField("name", "STRING")]


def event_spec(region: str) -> TableSchema:
    """A table per region: partitioned by day on ``ts``, kept a week, labelled with its
    region."""
    return TableSchema.of(
        EVENTS,
        primary_key=["id"],
        clustering_fields=["region", "user_id"],
        time_partitioning=TimePartitioning(type_="DAY", field="ts", expiration_ms=WEEK_MS),
        require_partition_filter=True,
        labels={"region": region, "team": "analytics"},
        description=f"Events of region {region}",
        kms_key_name=KMS,
    )


#: Each destination's spec: two regions' event tables, a range-partitioned table, a plain one.
SPECS = {
    "events_eu": event_spec("eu"),
    "events_us": event_spec("us"),
    "accounts": TableSchema.of(
        ACCOUNTS,
        clustering_fields=["account_id"],
        range_partitioning=RangePartitioning(
            PartitionRange(start=0, end=1000, interval=10), field="account_id"
        ),
        require_partition_filter=False,
        labels={"kind": "accounts"},
        description="Accounts by id range",
    ),
    "plain": TableSchema.of(ACCOUNTS),
}

#: What the emulator does not keep: bqemulator's ``TableMeta`` has no field for
#: ``tableConstraints``, and the launcher leaves it out on purpose (the sink falls back on the
#: serializer's primary key).
EMULATOR_DROPS = ("tableConstraints",)


class PerDestination(BigQuerySerializer):
    """Rows as they come; each table's spec from :data:`SPECS`."""

    def serialize(self, record: Any, context: Any) -> Any:
        return record

    def schema(self, destination: TableDestination) -> TableSchema:
        return SPECS[destination.table]


class Resolver:
    def resolve(self, record: Any, context: Any) -> Any:
        raise AssertionError("the test drives the table catalog, not the writer")


@pytest.fixture
def catalog(project: str) -> Iterator[TableCatalog]:
    """The table catalog of a sink writing :class:`PerDestination` rows (the writer's own)."""
    sink = (
        BigQuerySink.builder()
        .set_sink_name("table-spec")
        .set_destination_resolver(Resolver())
        .set_serializer(PerDestination())
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .build()
    )
    tables, threads = open_metadata(sink._sink_config().factory, 0)
    threads.shutdown()
    try:
        yield tables
    finally:
        tables.close()


def _record_creates(catalog: TableCatalog, project: str) -> list[dict[str, Any]]:
    """The body of each create request the catalog sends (the REST client's own form)."""
    client = catalog._client(project)
    sent: list[dict[str, Any]] = []
    create = client.create_table

    def recording(table: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(table.to_api_repr())
        return create(table, *args, **kwargs)

    client.create_table = recording
    return sent


def test_each_destination_is_created_with_its_own_spec(project: str, catalog: TableCatalog) -> None:
    dataset = make_dataset(project, "spec")
    sent = _record_creates(catalog, project)
    for name in SPECS:
        catalog.layout(TableDestination.of(project, dataset, name))
    assert catalog.tables_created == len(SPECS)

    # What the sink asked for: every setting, per destination.
    requests = {body["tableReference"]["tableId"]: body for body in sent}
    assert set(requests) == set(SPECS)
    eu = requests["events_eu"]
    assert eu["timePartitioning"] == {"type": "DAY", "field": "ts", "expirationMs": str(WEEK_MS)}
    assert eu["requirePartitionFilter"] is True
    assert eu["clustering"] == {"fields": ["region", "user_id"]}
    assert eu["labels"] == {"region": "eu", "team": "analytics"}
    assert eu["description"] == "Events of region eu"
    assert eu["encryptionConfiguration"] == {"kmsKeyName": KMS}
    assert eu["tableConstraints"]["primaryKey"] == {"columns": ["id"]}
    assert requests["events_us"]["labels"] == {"region": "us", "team": "analytics"}
    accounts = requests["accounts"]
    assert accounts["rangePartitioning"] == {
        "field": "account_id",
        "range": {"start": "0", "end": "1000", "interval": "10"},
    }
    assert accounts["requirePartitionFilter"] is False
    assert "timePartitioning" not in accounts and "encryptionConfiguration" not in accounts
    assert set(requests["plain"]) <= {"tableReference", "schema", "labels"}

    # What the emulator kept, read back with the client library.
    client = bq_client(project)
    try:
        got = {name: client.get_table(f"{project}.{dataset}.{name}") for name in SPECS}
    finally:
        client.close()
    for region in ("eu", "us"):
        table = got[f"events_{region}"]
        assert [(f.name, f.field_type, f.mode) for f in table.schema] == [
            (f.name, f.field_type, f.mode) for f in EVENTS
        ]
        assert table.time_partitioning is not None
        assert table.time_partitioning.type_ == "DAY"
        assert table.time_partitioning.field == "ts"
        assert table.time_partitioning.expiration_ms == WEEK_MS
        assert table.clustering_fields == ["region", "user_id"]
        assert table.labels == {"region": region, "team": "analytics"}
        assert table.description == f"Events of region {region}"
        assert table.range_partitioning is None
        assert table.require_partition_filter is True
        assert table.encryption_configuration.kms_key_name == KMS
        assert table.table_constraints is None  # EMULATOR_DROPS
    accounts_table = got["accounts"]
    assert accounts_table.clustering_fields == ["account_id"]
    assert accounts_table.labels == {"kind": "accounts"}
    assert accounts_table.description == "Accounts by id range"
    assert accounts_table.time_partitioning is None
    ranged = accounts_table.range_partitioning
    assert ranged is not None and ranged.field == "account_id"
    assert (ranged.range_.start, ranged.range_.end, ranged.range_.interval) == (0, 1000, 10)
    assert accounts_table.require_partition_filter is False
    plain = got["plain"]
    assert (plain.time_partitioning, plain.range_partitioning, plain.clustering_fields) == (
        None,
        None,
        None,
    )
    assert (plain.labels, plain.description, plain.encryption_configuration) == ({}, None, None)
    for body in (t.to_api_repr() for t in got.values()):
        assert not set(EMULATOR_DROPS) & set(body), body


def test_a_table_created_once_keeps_its_spec_and_is_not_created_again(
    project: str, catalog: TableCatalog
) -> None:
    dataset = make_dataset(project, "spec")
    destination = TableDestination.of(project, dataset, "events_eu")
    catalog.layout(destination)
    catalog.layout(destination)  # found now: no second create, no second token
    assert catalog.tables_created == 1
    client = bq_client(project)
    try:
        table = client.get_table(destination.table_id)
    finally:
        client.close()
    assert table.labels == {"region": "eu", "team": "analytics"}
