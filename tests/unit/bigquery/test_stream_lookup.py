"""A new table's layout from its default stream, and the hand-over to the REST lookup (the
call itself runs against the emulator in the integration tests)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import grpc
import pytest
from google.cloud.bigquery import SchemaField
from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQueryWriterOptions,
    TableDestination,
    TableSchema,
    UnknownFields,
)
from pyflink_gcp.bigquery.stream_lookup import (
    StreamLookups,
    UnknownColumnType,
    storage_fields,
)
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout, schema_key
from pyflink_gcp.core import WriteError
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy

DEST = TableDestination.of("p", "d", "t")
WriteStream = storage_types.WriteStream.pb()


def stream(fields: list[tuple[str, int, int]], location: str = "europe-west3") -> Any:
    """A GetWriteStream answer with these (name, type, mode) columns."""
    answer = WriteStream(name=DEST.default_stream, location=location)
    for name, kind, mode in fields:
        answer.table_schema.fields.add(name=name, type_=kind, mode=mode)
    return answer


def test_storage_fields_read_as_the_rest_schema_of_the_same_table() -> None:
    answer = WriteStream()
    answer.table_schema.fields.add(name="id", type_=2, mode=2)  # INT64 REQUIRED
    answer.table_schema.fields.add(name="tags", type_=1, mode=3)  # STRING REPEATED
    customer = answer.table_schema.fields.add(name="customer", type_=4, mode=1)  # STRUCT
    customer.fields.add(name="name", type_=1)  # mode unspecified: NULLABLE
    answer.table_schema.fields.add(name="at", type_=7)
    during = answer.table_schema.fields.add(name="during", type_=16)  # RANGE<DATE>
    during.range_element_type.type_ = 8
    rest = [
        SchemaField("id", "INTEGER", mode="REQUIRED"),
        SchemaField("tags", "STRING", mode="REPEATED"),
        SchemaField("customer", "RECORD", fields=[SchemaField("name", "STRING")]),
        SchemaField("at", "TIMESTAMP"),
        SchemaField("during", "RANGE", range_element_type="DATE"),
    ]
    fields = storage_fields(answer.table_schema.fields)
    # The same schema key: a table looked up either way shares its schema's encoders.
    assert schema_key(fields) == schema_key(rest)
    assert fields[4].range_element_type.element_type == "DATE"


def test_a_column_type_not_known_here_is_left_to_the_rest_lookup() -> None:
    answer = WriteStream()
    answer.table_schema.fields.add(name="future", type_=99)
    with pytest.raises(UnknownColumnType, match="future"):
        storage_fields(answer.table_schema.fields)


class Keyed(BigQuerySerializer):
    def serialize(self, record: Any, context: Any) -> Any:
        return record

    def schema(self, destination: TableDestination) -> Any:
        return TableSchema.of(
            [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("name", "STRING")],
            primary_key=["id"],
        )


class Plain(BigQuerySerializer):
    def serialize(self, record: Any, context: Any) -> Any:
        return record


class Calls:
    """A channel whose GetWriteStream calls wait for the test to answer them."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, Future[Any], Any]] = []

    def unary_unary(self, method: str, **_: Any) -> Any:
        assert method.endswith("/GetWriteStream")
        calls = self

        class Stub:
            def future(self, request: Any, timeout: float, metadata: Any) -> Future[Any]:
                call: Future[Any] = Future()
                calls.started.append((request, call, metadata))
                return call

        return Stub()


class RestLookups:
    """The metadata threads' side: what was handed over, answered by the test."""

    def __init__(self, closed: bool = False) -> None:
        self.asked: list[tuple[TableDestination, Future[TableLayout]]] = []
        self.closed = closed

    def __call__(self, destination: TableDestination) -> Future[TableLayout]:
        if self.closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[TableLayout] = Future()
        self.asked.append((destination, future))
        return future


def lookups(
    serializer: Any, rest: RestLookups | None = None, **options: Any
) -> tuple[StreamLookups, Calls]:
    catalog = TableCatalog(
        sink_name="s",
        resolver_name="Resolver",
        serializer=serializer,
        options=BigQueryWriterOptions(**options),
        create_disposition=CreateDisposition.CREATE_IF_NEEDED,
        rest_endpoint="http://127.0.0.1:1",
        retry=RetryPolicy(deadline_s=0),
    )
    calls = Calls()
    return StreamLookups(calls, catalog, rest or RestLookups(), timeout_s=5), calls  # type: ignore[arg-type]


def test_an_answered_stream_gives_the_layout_its_columns_location_and_declared_key() -> None:
    streams, calls = lookups(Keyed())
    layout = streams.layout(DEST)
    request, call, metadata = calls.started[0]
    assert request.name == "projects/p/datasets/d/tables/t/streams/_default"
    assert request.view == storage_types.WriteStreamView.FULL
    assert metadata == (("x-goog-request-params", f"name={request.name}"),)
    assert not layout.done()  # no thread waits: the answer completes it
    call.set_result(stream([("id", 2, 2), ("name", 1, 1)]))
    got = layout.result(timeout=0)
    assert [f.name for f in got.fields] == ["id", "name"]
    assert got.location == "europe-west3"
    assert got.encoder.primary_key == ("id",)
    assert not got.table_key_known  # the table's own key was not asked for
    assert (streams.answered, streams.handed_over) == (1, 0)


def test_a_failed_call_hands_the_table_to_the_rest_lookup_with_its_outcome() -> None:
    rest = RestLookups()
    streams, calls = lookups(Plain(), rest)
    missing = streams.layout(DEST)
    calls.started[0][1].set_exception(grpc.RpcError("NOT_FOUND"))
    assert [d for d, _ in rest.asked] == [DEST] and not missing.done()
    created = TableLayout.of([SchemaField("id", "INT64")])
    rest.asked[0][1].set_result(created)
    assert missing.result(timeout=0) is created
    # The REST lookup's error (a table it may not create, say) is the table's error.
    refused = streams.layout(DEST)
    calls.started[1][1].set_exception(grpc.RpcError("UNAVAILABLE"))
    rest.asked[1][1].set_exception(WriteError("table t does not exist and ..."))
    with pytest.raises(WriteError, match="does not exist"):
        refused.result(timeout=0)
    assert (streams.answered, streams.handed_over) == (0, 2)


def test_an_answer_the_layout_cannot_be_built_from_goes_to_the_rest_lookup() -> None:
    rest = RestLookups()
    streams, calls = lookups(Plain(), rest)
    streams.layout(DEST)
    calls.started[0][1].set_result(stream([("future", 99, 1)]))
    assert [d for d, _ in rest.asked] == [DEST]


def test_a_lookup_that_ends_after_close_fails_the_table_instead_of_hanging() -> None:
    streams, calls = lookups(Plain(), RestLookups(closed=True))
    layout = streams.layout(DEST)
    calls.started[0][1].set_exception(grpc.RpcError("CANCELLED"))
    with pytest.raises(WriteError, match="closed before its lookup ended"):
        layout.result(timeout=0)


def test_at_most_the_check_bound_of_calls_are_in_flight() -> None:
    rest = RestLookups()
    streams, calls = lookups(Plain(), rest)
    layouts = [streams.layout(TableDestination.of("p", "d", f"t{i}")) for i in range(100)]
    assert len(calls.started) == 64
    calls.started[0][1].set_result(stream([("id", 2, 1)]))
    assert len(calls.started) == 65 and layouts[0].done()
    streams.close()  # the 35 still queued hand over to the REST lookup
    assert len(calls.started) == 65 and len(rest.asked) == 35
    assert sum(f.done() for f in layouts) == 1


def test_a_lookup_its_writer_cancelled_ends_quietly_and_asks_nothing_more() -> None:
    rest = RestLookups()
    streams, calls = lookups(Plain(), rest)
    answered, failed = streams.layout(DEST), streams.layout(DEST)
    assert answered.cancel() and failed.cancel()  # both writers closed before the answers
    calls.started[0][1].set_result(stream([("id", 2, 1)]))  # raises nothing on gRPC's thread
    calls.started[1][1].set_exception(grpc.RpcError("UNAVAILABLE"))
    assert rest.asked == [] and streams.handed_over == 0
    # A REST lookup whose writer went away meanwhile ends quietly too.
    pending = streams.layout(DEST)
    calls.started[2][1].set_exception(grpc.RpcError("NOT_FOUND"))
    assert pending.cancel()
    rest.asked[0][1].set_result(TableLayout.of([SchemaField("id", "INT64")]))


class Unimplemented(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED


def test_an_endpoint_without_get_write_stream_is_not_asked_again() -> None:
    rest = RestLookups()
    streams, calls = lookups(Plain(), rest)
    streams.layout(DEST)
    calls.started[0][1].set_exception(Unimplemented())
    assert not streams.enabled and len(rest.asked) == 1
    later = streams.layout(TableDestination.of("p", "d", "later"))
    assert len(calls.started) == 1  # no second call: straight to the REST lookup
    assert rest.asked[1] == (TableDestination.of("p", "d", "later"), later)


# -- tables of a dataset already met: the declared schema, no call -----------------------------

SAME_DATASET = TableDestination.of("p", "d", "t2")
OTHER_DATASET = TableDestination.of("p", "e", "t3")


def _first_answered(streams: StreamLookups, calls: Calls) -> None:
    first = streams.layout(DEST)
    assert isinstance(first, Future)
    calls.started[0][1].set_result(stream([("id", 2, 2), ("name", 1, 1), ("more", 1, 1)]))
    assert first.result(timeout=0).location == "europe-west3"


def test_a_new_table_of_a_dataset_met_takes_the_declared_schema_at_its_location() -> None:
    streams, calls = lookups(Keyed())
    _first_answered(streams, calls)

    layout = streams.layout(SAME_DATASET)
    assert isinstance(layout, TableLayout) and layout.assumed
    assert [f.name for f in layout.fields] == ["id", "name"]  # declared, not the stream's
    assert layout.location == "europe-west3" and layout.encoder.primary_key == ("id",)
    assert not layout.table_key_known
    assert len(calls.started) == 1 and streams.assumed == 1
    # Another dataset's location is not known: that table is asked.
    assert isinstance(streams.layout(OTHER_DATASET), Future) and len(calls.started) == 2
    # A sender gives the assumed layout up: the table is asked after all.
    checked = streams.check_later(SAME_DATASET)
    calls.started[2][1].set_result(stream([("id", 2, 2)], location="europe-west3"))
    assert not checked.result(timeout=0).assumed
    assert (streams.assumed, streams.checked_after, streams.answered) == (1, 1, 2)


@pytest.mark.parametrize(
    ("serializer", "options"),
    [(Plain(), {}), (Keyed(), {"unknown_fields": UnknownFields.IGNORE})],
    ids=["no declared schema", "unknown fields ignored"],
)
def test_every_table_is_asked_without_a_declared_schema_or_when_unknown_keys_are_dropped(
    serializer: Any, options: dict[str, Any]
) -> None:
    streams, calls = lookups(serializer, **options)
    _first_answered(streams, calls)
    assert isinstance(streams.layout(SAME_DATASET), Future)
    assert len(calls.started) == 2 and streams.assumed == 0


class Raising(Keyed):
    def schema(self, destination: TableDestination) -> Any:
        if destination.table == "t2":
            raise KeyError("t2")
        return super().schema(destination)


def test_a_declared_schema_that_raises_leaves_the_table_to_its_lookup() -> None:
    streams, calls = lookups(Raising())
    _first_answered(streams, calls)
    assert isinstance(streams.layout(SAME_DATASET), Future)
    assert len(calls.started) == 2 and streams.assumed == 0


def test_tables_met_while_their_datasets_first_lookup_runs_wait_for_it_not_a_call_each() -> None:
    streams, calls = lookups(Keyed())
    first = streams.layout(DEST)
    waiting = [streams.layout(TableDestination.of("p", "d", f"t{i}")) for i in range(2, 5)]
    assert len(calls.started) == 1  # one call for the burst
    assert all(isinstance(w, Future) and not w.done() for w in waiting)

    calls.started[0][1].set_result(stream([("id", 2, 2), ("name", 1, 1)]))
    assert not first.result(timeout=0).assumed  # type: ignore[union-attr]
    layouts = [w.result(timeout=0) for w in waiting]  # type: ignore[union-attr]
    assert all(layout.assumed and layout.location == "europe-west3" for layout in layouts)
    assert len(calls.started) == 1 and streams.assumed == 3


def test_a_table_waiting_for_a_failed_first_lookup_is_looked_up_itself() -> None:
    rest = RestLookups()
    streams, calls = lookups(Keyed(), rest)
    first = streams.layout(DEST)
    waiting = streams.layout(SAME_DATASET)
    calls.started[0][1].set_exception(grpc.RpcError("UNAVAILABLE"))
    rest.asked[0][1].set_exception(WriteError("table t: creation refused"))
    with pytest.raises(WriteError, match="creation refused"):
        first.result(timeout=0)  # type: ignore[union-attr]
    # The waiting table's own lookup: its stream answers.
    assert len(calls.started) == 2 and calls.started[1][0].name.endswith("/t2/streams/_default")
    calls.started[1][1].set_result(stream([("id", 2, 2)]))
    got = waiting.result(timeout=0)  # type: ignore[union-attr]
    assert not got.assumed and [f.name for f in got.fields] == ["id"]
    assert streams.assumed == 0


class NotFound(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.NOT_FOUND


def test_a_missing_table_makes_its_datasets_new_tables_asked_first() -> None:
    # Tables made on demand: an append to a missing one may end a shared connection.
    rest = RestLookups()
    streams, calls = lookups(Keyed(), rest)
    _first_answered(streams, calls)
    assert isinstance(streams.layout(SAME_DATASET), TableLayout)

    streams.check_later(SAME_DATASET)  # its first append found no table
    calls.started[1][1].set_exception(NotFound())
    assert [d for d, _ in rest.asked] == [SAME_DATASET]  # created over REST
    later = streams.layout(TableDestination.of("p", "d", "t9"))
    assert isinstance(later, Future) and len(calls.started) == 3
    assert streams.assumed == 1


def test_a_dataset_whose_first_table_was_missing_asks_every_table_without_waiting() -> None:
    rest = RestLookups()
    streams, calls = lookups(Keyed(), rest)
    streams.layout(DEST)
    calls.started[0][1].set_exception(NotFound())
    rest.asked[0][1].set_result(TableLayout.of([SchemaField("id", "INT64")]))  # created
    assert isinstance(streams.layout(SAME_DATASET), Future)
    assert isinstance(streams.layout(TableDestination.of("p", "d", "t3")), Future)
    assert len(calls.started) == 3 and streams.assumed == 0  # a call each, none waiting
