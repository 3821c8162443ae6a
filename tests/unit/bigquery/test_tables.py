"""Table layouts and the catalog's handling of the serializer's schema and the creation bound
(the REST lookups themselves run against the emulator in the integration tests)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQueryWriterOptions,
    RowFormat,
    TableDestination,
    TableSchema,
)
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout
from pyflink_gcp.core import CreationLimitExceededError, SerializerError, WriteError
from pyflink_gcp.core.creation import CreationBudget
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy

DEST = TableDestination.of("p", "d", "t")
SCALARS = [SchemaField("id", "INT64"), SchemaField("name", "STRING")]
NESTED = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("customer", "RECORD", fields=[SchemaField("name", "STRING")]),
]


def test_layouts_carry_an_arrow_encoder_only_where_arrow_can_take_the_table() -> None:
    assert TableLayout.of(SCALARS).arrow is not None
    assert TableLayout.of(SCALARS, row_format=RowFormat.PROTO).arrow is None
    nested = TableLayout.of(NESTED, ("id",))
    assert nested.arrow is None
    assert nested.encoder.primary_key == ("id",)


def catalog(serializer: Any, **options: Any) -> TableCatalog:
    return TableCatalog(
        sink_name="s",
        resolver_name="Resolver",
        serializer=serializer,
        options=BigQueryWriterOptions(**options),
        create_disposition=CreateDisposition.CREATE_IF_NEEDED,
        rest_endpoint="http://127.0.0.1:1",
        retry=RetryPolicy(deadline_s=0),
    )


class Listed(BigQuerySerializer):
    def serialize(self, record: Any, context: Any) -> Any:
        return record

    def schema(self, destination: TableDestination) -> Any:
        return {"t": NESTED, "bad": "id:INT64"}.get(destination.table)


def test_the_serializer_schema_may_be_a_schema_field_list() -> None:
    tables = catalog(Listed())
    assert tables.serializer_schema(DEST) == TableSchema.of(NESTED)
    assert tables.serializer_schema(TableDestination.of("p", "d", "other")) is None
    with pytest.raises(SerializerError, match=r"Listed schema\(\) for table p\.d\.bad: .*got str"):
        tables.serializer_schema(TableDestination.of("p", "d", "bad"))
    assert catalog(lambda r, c: r).serializer_schema(DEST) is None


def test_a_failing_schema_function_is_a_serializer_error_naming_the_table() -> None:
    def broken(destination: TableDestination) -> Any:
        raise KeyError(destination.table)

    tables = catalog(BigQuerySerializer.of(schema=broken))
    with pytest.raises(SerializerError, match=r"raised KeyError: 't' for table p\.d\.t"):
        tables.serializer_schema(DEST)


def test_the_creation_bound_fails_before_any_request() -> None:
    tables = catalog(BigQuerySerializer.of(schema=NESTED), max_created_destinations=0)
    with pytest.raises(
        CreationLimitExceededError,
        match=r"p\.d\.t would exceed max_created_destinations=0 per 1h: .*Resolver",
    ):
        tables._create(DEST)
    assert tables.tables_created == 0
    tables.close()


def test_the_creation_budget_counts_tables_created_and_refills_over_its_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    tables = catalog(BigQuerySerializer.of(schema=NESTED))
    tables.budget = CreationBudget(2, timedelta(hours=1), clock=lambda: now[0])
    failing = {"p.d.broken"}

    def create(destination: TableDestination) -> str:
        if destination.table_id in failing:
            raise WriteError("create table failed")
        return destination.table_id

    monkeypatch.setattr(tables, "_create_counted", create)
    assert tables._create(TableDestination.of("p", "d", "day1")) == "p.d.day1"
    with pytest.raises(WriteError):  # created nothing: its token comes back
        tables._create(TableDestination.of("p", "d", "broken"))
    assert tables._create(TableDestination.of("p", "d", "day2")) == "p.d.day2"
    with pytest.raises(CreationLimitExceededError) as err:
        tables._create(TableDestination.of("p", "d", "day3"))
    assert str(err.value).startswith(
        "sink 's': creating table p.d.day3 would exceed max_created_destinations=2 per 1h: "
        "this subtask created 2 tables in the last 0.0s. The destination resolver Resolver "
    )
    assert "BigQueryWriterOptions.builder().max_created_destinations(n, per=" in str(err.value)
    now[0] += 1_800
    assert tables._create(TableDestination.of("p", "d", "day3")) == "p.d.day3"
    assert tables.tables_created == 3
    tables.close()


def test_a_table_the_sink_cannot_write_ends_the_job_naming_the_table_and_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from pyflink_gcp.core import ConfigurationError
    from pyflink_gcp.core.errors import is_non_retriable

    tables = catalog(lambda r, c: r)
    table = SimpleNamespace(schema=[*SCALARS, SchemaField("r", "RANGE")], table_constraints=None)
    monkeypatch.setattr(tables, "_get_or_create", lambda destination: table)
    with pytest.raises(ConfigurationError) as err:
        tables.layout(DEST)
    assert str(err.value) == (
        "sink 's': table p.d.t: column 'r' has type RANGE, which the sink cannot write"
    )
    assert is_non_retriable(err.value)
    tables.close()


def test_an_unreachable_rest_endpoint_is_retried_until_the_deadline_and_named() -> None:
    # A refused connection has no HTTP status; it is transient (retried), and the final error
    # names the sink, the table and the endpoint, within the deadline plus one attempt.
    import time

    from pyflink_gcp.core.errors import WriteError
    from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

    def lookup(endpoint: str) -> tuple[str, float]:
        tables = TableCatalog(
            sink_name="orders-bq",
            resolver_name="Resolver",
            serializer=Listed(),
            options=BigQueryWriterOptions(),
            create_disposition=CreateDisposition.CREATE_NEVER,
            rest_endpoint=f"http://{endpoint}",
            retry=RetryPolicy(initial_backoff_s=0.05, max_backoff_s=0.2, deadline_s=1.0),
        )
        start = time.monotonic()
        try:
            with pytest.raises(WriteError) as err:
                tables.layout(DEST)
        finally:
            tables.close()
        return str(err.value), time.monotonic() - start

    refused = refusing_endpoint()
    message, elapsed = lookup(refused)
    assert f"sink 'orders-bq': get table p.d.t at http://{refused}: still failing" in message
    assert "UNAVAILABLE" in message and elapsed < 3
    with black_hole_endpoint() as silent:
        message, elapsed = lookup(silent)
    assert f"get table p.d.t at http://{silent}" in message and "DEADLINE_EXCEEDED" in message
    assert elapsed < 1.0 + 5.0 + 2


def test_tables_of_one_schema_share_their_encoders_and_other_schemas_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    tables = catalog(lambda r, c: r)
    schemas = {
        "a": SCALARS,
        # Equal columns spelled anew, another description: still one schema to the encoders.
        "b": [SchemaField("id", "INT64", description="the id"), SchemaField("name", "STRING")],
        "c": [*SCALARS, SchemaField("added", "STRING")],  # a column more
        "d": [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("name", "STRING")],
        "e": NESTED,
    }
    locations = {"a": "EU", "b": "US"}
    monkeypatch.setattr(
        tables,
        "_get_or_create",
        lambda dest: SimpleNamespace(
            schema=schemas[dest.table], table_constraints=None, location=locations.get(dest.table)
        ),
    )
    layouts = {t: tables.layout(TableDestination.of("p", "d", t)) for t in schemas}
    a, b, c, d, e = layouts.values()
    assert a.encoder is b.encoder and a.arrow is b.arrow and a.fields is b.fields
    # The writer schemas a request of protobuf rows carries too (copies of the descriptor).
    assert a.writer_schemas is b.writer_schemas
    assert a.writer_schemas is not c.writer_schemas
    assert a.writer_schemas[0].proto_descriptor == a.encoder.descriptor
    assert a.writer_schemas[1].proto_descriptor == a.encoder.cdc_descriptor
    # Each table keeps its own layout (its location is its own).
    assert a is not b and (a.location, b.location) == ("EU", "US")
    others = [a.encoder, c.encoder, d.encoder, e.encoder]
    assert len({id(x) for x in others}) == 4
    assert c.encoder.columns == ("id", "name", "added")
    assert d.arrow is not None and d.arrow is not a.arrow
    assert e.arrow is None and e.encoder.columns == ("id", "customer")
    assert (tables.encoders.built, tables.encoders.shared, len(tables.encoders)) == (4, 1, 4)
    # A shared encoder writes each table's rows as that table's own encoder would.
    row = {"id": 7, "name": "x"}
    assert b.encoder.encode(row) == TableLayout.of(schemas["b"]).encoder.encode(row)
    tables.close()


def test_a_table_whose_schema_changed_gets_encoders_of_the_new_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer re-created after its table was replaced (idle timeout, LRU) sees the new
    columns, and tables still of the old schema keep sharing theirs."""
    from types import SimpleNamespace

    tables = catalog(lambda r, c: r)
    current = {"t": SCALARS, "u": SCALARS}
    monkeypatch.setattr(
        tables,
        "_get_or_create",
        lambda dest: SimpleNamespace(schema=current[dest.table], table_constraints=None),
    )
    before = tables.layout(DEST)
    current["t"] = [*SCALARS, SchemaField("added", "STRING")]
    after = tables.layout(DEST)
    assert after.encoder is not before.encoder
    assert after.encoder.columns == ("id", "name", "added")
    assert tables.layout(TableDestination.of("p", "d", "u")).encoder is before.encoder
    tables.close()


def test_the_primary_key_and_the_options_are_part_of_what_is_shared() -> None:
    from pyflink_gcp.bigquery.tables import EncoderCache

    cache = EncoderCache()
    plain = cache.layout(SCALARS)
    keyed = cache.layout(SCALARS, ("id",))
    assert keyed.encoder is not plain.encoder and keyed.encoder.primary_key == ("id",)
    assert cache.layout(SCALARS, ("id",)).encoder is keyed.encoder
    proto = cache.layout(SCALARS, row_format=RowFormat.PROTO)
    assert proto.arrow is None and proto.encoder is not plain.encoder
    lenient = cache.layout(SCALARS, ignore_unknown_values=True)
    assert lenient.encoder is not plain.encoder
    assert lenient.encoder.encode({"id": 1, "unknown": 2}) == plain.encoder.encode({"id": 1})


def test_the_shared_encoders_are_bounded_least_recently_used_first() -> None:
    from pyflink_gcp.bigquery.tables import EncoderCache

    cache = EncoderCache(capacity=2)
    schemas = [[SchemaField(f"c{i}", "INT64")] for i in range(3)]
    first = cache.layout(schemas[0])
    cache.layout(schemas[1])
    assert cache.layout(schemas[0]).encoder is first.encoder  # 0 used again: 1 is the oldest
    cache.layout(schemas[2])
    assert len(cache) == 2
    assert cache.layout(schemas[0]).encoder is first.encoder
    assert cache.built == 3
    cache.layout(schemas[1])  # fell out: built again
    assert (cache.built, len(cache)) == (4, 2)
    # A layout still in use keeps working after its schema fell out of the cache.
    assert first.encoder.encode({"c0": 5}) == TableLayout.of(schemas[0]).encoder.encode({"c0": 5})


@pytest.mark.parametrize("update", ["NONE", "ADD_COLUMNS"])
def test_the_serializers_schema_is_asked_for_once_per_table_lookup(
    monkeypatch: pytest.MonkeyPatch, update: str
) -> None:
    from types import SimpleNamespace

    from pyflink_gcp.bigquery import SchemaUpdate

    asked: list[str] = []

    class NoSchema(BigQuerySerializer):
        def serialize(self, record: Any, context: Any) -> Any:
            return record

        def schema(self, destination: TableDestination) -> Any:
            asked.append(destination.table)
            return None  # none for this table: the table's own columns

    tables = catalog(NoSchema(), schema_update=SchemaUpdate(update))
    table = SimpleNamespace(schema=SCALARS, table_constraints=None, location="EU")
    monkeypatch.setattr(tables, "_get_or_create", lambda destination: table)
    layout = tables.layout(DEST)
    assert asked == ["t"]  # once, whether the sink updates schemas or not
    assert layout.encoder.primary_key == () and layout.location == "EU"
    tables.close()
