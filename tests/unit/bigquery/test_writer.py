"""The processing-thread half of a table writer and the writer factory: type checks, requests
cut by size and by change-data-capture key, the writer's lifetime in the registry (flushed and
closed when the active-destinations cap releases it), and config-only pickling."""

from __future__ import annotations

import pickle
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    OrderingMode,
    RowFormat,
    TableDestination,
)
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.bigquery.writer import (
    BigQueryWriterFactory,
    BufferedBigQueryWriterFactory,
    TableWriter,
)
from pyflink_gcp.core import SerializerError, SubtaskInfo, WriteError
from pyflink_gcp.core.sink_writer import SinkWriter
from tests.unit.bigquery.test_sender import (
    DEST,
    ENCODER_SCHEMA,
    FORMATS,
    FakeService,
    factory,
    writer,
)


def test_a_serializer_returning_something_else_than_a_row_is_a_clear_error() -> None:
    w = writer(FakeService())
    with pytest.raises(
        SerializerError, match=r"sink 'test-sink': the serializer returned list for table p\.d\.t"
    ):
        w.write([1, 2], "the-record")


def test_rows_larger_than_a_request_are_rejected_without_an_rpc() -> None:
    service = FakeService()
    made = factory(service, max_request_bytes=1_000)
    w = made.writer_for(DEST, TableLayout.of(ENCODER_SCHEMA))
    # A NULL for a key that is no column is nothing to write.
    w.write({"id": 1, "bad": False, "zzz": None}, "small")
    w2 = made.writer_for(
        DEST, TableLayout.of([SchemaField("id", "INT64"), SchemaField("s", "STRING")])
    )
    w2.write({"id": 2, "s": "x" * 5_000}, "huge")
    failed = w2.flush()
    assert len(failed) == 1 and "larger than an append request" in failed[0].reason
    assert w.flush() == []
    assert service.committed == [1]
    assert w2.requests_sent == 0


@FORMATS
def test_a_millisecond_timestamp_is_refused_naming_table_column_value_and_unit(
    row_format: RowFormat,
) -> None:
    service = FakeService()
    w = factory(service).writer_for(
        DEST,
        TableLayout.of(
            [SchemaField("id", "INT64"), SchemaField("ts", "TIMESTAMP")], row_format=row_format
        ),
    )
    micros = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z
    w.write({"id": 1, "ts": micros}, "micros")
    w.write({"id": 2, "ts": micros // 1_000}, "millis")
    w.write({"id": 3, "ts": 0}, "zero")
    [failed] = w.flush()
    assert failed.describe() == (
        "sink 'test-sink': destination 'projects/p/datasets/d/tables/t' rejected record "
        "'millis': column ts: TIMESTAMP 1704067200000 looks like epoch milliseconds "
        "(2024-01-01T00:00:00Z); ints are taken as epoch microseconds, which would put it at "
        "1970-01-20T17:21:07.200000Z. Give microseconds (milliseconds * 1,000) or a datetime"
    )
    assert service.committed == [1, 3] and service.formats == ["proto"]


def test_rows_are_handed_to_the_sender_a_request_at_a_time_while_records_arrive() -> None:
    service = FakeService()
    w = writer(service, max_request_rows=10)
    for i in range(25):
        w.write({"id": i}, i)
    # Two full requests were cut during write(); the open one waits for a bundle end.
    assert not w.is_clean
    w.start_flush()
    assert w.flush() == []
    assert service.requests == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
    assert w.is_clean and w.rows_appended == 25


CDC = [SchemaField("id", "INT64"), SchemaField("bad", "BOOL")]


def test_change_rows_are_encoded_on_arrival_and_a_request_never_holds_a_key_twice() -> None:
    service = FakeService()
    w = writer(service, OrderingMode.PER_TABLE)
    w.sender._layout_source = TableLayout.of(CDC, ("id",))
    w.write({"id": 1}, "plain")
    for key in (1, 2, 1, 3):
        w.write({"id": key, "_CHANGE_TYPE": "UPSERT"}, key)
    assert w.flush() == []
    # The plain row went as its own request; the change rows are cut before the second key 1.
    assert service.requests == [[1], [1, 2], [1, 3]]


def test_a_layout_from_the_stream_asks_the_table_for_its_key_at_the_first_change_row() -> None:
    service = FakeService()
    w = writer(service, OrderingMode.PER_TABLE)
    from_stream = TableLayout.of(CDC)  # a stream's schema says nothing of the table's key
    from_stream.table_key_known = False
    w.sender._layout_source = from_stream
    asked: list[str] = []

    def table_layout() -> TableLayout:
        asked.append("rest")
        return TableLayout.of(CDC, ("id",))

    w._table_layout = table_layout
    w.write({"id": 1}, "plain")  # plain rows need no key
    assert asked == []
    for key in (1, 2, 1, 3):
        w.write({"id": key, "_CHANGE_TYPE": "UPSERT"}, key)
    assert w.flush() == []
    assert asked == ["rest"]  # once, at the first change row
    assert service.requests == [[1], [1, 2], [1, 3]]


def test_a_layout_that_knows_a_key_or_asked_the_table_asks_nothing_more() -> None:
    for layout in (TableLayout.of(CDC), TableLayout.of(CDC, ("id",))):
        layout.table_key_known = layout.encoder.primary_key == ()
        w = writer(FakeService(), OrderingMode.PER_TABLE)
        w.sender._layout_source = layout
        w._table_layout = lambda: pytest.fail("asked the table")  # type: ignore[assignment]
        w.write({"id": 1, "_CHANGE_TYPE": "UPSERT"}, 1)
        assert w.flush() == []


def test_a_change_row_on_a_buffered_stream_ends_the_job_naming_the_default_stream() -> None:
    from concurrent.futures import Future

    from pyflink_gcp.core import ConfigurationError
    from pyflink_gcp.core.errors import is_non_retriable

    service = FakeService()
    made = factory(service)
    stream: Future[str] = Future()
    stream.set_result(f"{DEST.default_stream.removesuffix('_default')}buffered-1")
    made.stream_for = lambda destination, layout: stream  # type: ignore[method-assign]
    w = made.writer_for(DEST, TableLayout.of(CDC, ("id",)))
    assert w.sender.offsets is not None  # a BUFFERED stream's writer
    with pytest.raises(ConfigurationError) as err:
        w.write({"id": 1, "_CHANGE_TYPE": "UPSERT"}, "the record")
    assert str(err.value) == (
        "sink 'test-sink': a change-data-capture row (_CHANGE_TYPE) for table p.d.t, but "
        "BigQuery applies upserts and deletes only on the default stream: use "
        "WriteMethod.STORAGE_API_AT_LEAST_ONCE for CDC tables. Record: 'the record'"
    )
    assert is_non_retriable(err.value)
    assert service.requests == []


def test_a_dirty_writer_released_at_the_active_destinations_cap_is_flushed_then_closed() -> None:
    service = FakeService(stream=None)
    options = BigQueryWriterOptions.builder().max_active_destinations(2).build()
    sink = (
        BigQuerySink.builder()
        .set_destination_resolver(lambda r, c: TableDestination.of("p", "d", f"t{r['t']}"))
        .set_serializer(BigQuerySerializer.of(lambda r: {"id": r["id"]}))
        .set_writer_options(options)
        .build()
    )
    config = sink._sink_config()
    made = config.factory
    sink_writer = SinkWriter(config)
    _open_with(made, service)
    closed: list[str] = []
    original_close = TableWriter.close

    def close(self: TableWriter) -> None:
        # Released writers are flushed first: nothing of theirs is left to send.
        assert self.is_clean
        closed.append(self.destination.table)
        original_close(self)

    TableWriter.close = close  # type: ignore[method-assign]
    try:
        for i in range(60):
            sink_writer.write({"t": i // 10, "id": i})
        sink_writer.flush()
    finally:
        TableWriter.close = original_close  # type: ignore[method-assign]
    assert sorted(service.committed) == list(range(60))
    assert len(sink_writer.registry) == 2
    assert sink_writer.registry.created == 6
    assert closed == ["t0", "t1", "t2", "t3"]
    made.close()


class _Catalog:
    """Bookkeeping stand-in for the REST lookup: every table has the same columns."""

    tables_created = 0

    def layout(self, destination: TableDestination) -> TableLayout:
        return TableLayout.of(ENCODER_SCHEMA)

    def close(self) -> None:
        pass


def _open_with(made: BigQueryWriterFactory, service: FakeService) -> None:
    made.stub = service
    made.metadata_executor = ThreadPoolExecutor(1)
    made.catalog = _Catalog()  # type: ignore[assignment]


class Passing(grpc.StreamStreamClientInterceptor):  # type: ignore[misc]
    """An interceptor that passes every call through (it travels with the factory)."""

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(details, requests)


def test_the_factory_pickles_its_configuration_only() -> None:
    made = BigQueryWriterFactory(
        sink_name="s",
        resolver=None,
        serializer=BigQuerySerializer.of(),
        options=BigQueryWriterOptions(max_request_rows=7),
        storage_endpoint="http://127.0.0.1:1",
        rest_endpoint="http://127.0.0.1:2",
    )
    made.interceptors = (Passing(),)
    with pytest.raises(WriteError, match="the writer factory is not open"):
        made.create_writer(DEST)
    made.open(SubtaskInfo("s", 0, 1))
    assert made.stub is not None and made.catalog is not None
    copy = pickle.loads(pickle.dumps(made))
    made.close()
    assert (copy.stub, copy.timers, copy.metadata_executor, copy.catalog) == (None,) * 4
    assert copy.options.max_request_rows == 7
    assert [type(i) for i in copy.interceptors] == [Passing]
    assert (copy.storage_endpoint, copy.rest_endpoint) == (
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
    )
    assert copy.tables_created == 0


@pytest.mark.parametrize("channels", [3, None])
def test_buffered_tables_connections_are_bounded_by_channel_count(channels: int | None) -> None:
    made = BufferedBigQueryWriterFactory(
        sink_name="s",
        resolver=None,
        serializer=BigQuerySerializer.of(),
        options=BigQueryWriterOptions(channel_count=channels),
        storage_endpoint="http://127.0.0.1:1",
        rest_endpoint="http://127.0.0.1:2",
    )
    made.open(SubtaskInfo("s", 0, 1))
    try:
        # Each BUFFERED stream has a connection of its own: no shared pool, a bound instead.
        assert made.pool is None
        if channels is None:
            assert made.slots is None
        else:
            assert made.slots is not None and made.slots.limit == channels
        made.stream_for = lambda *_: None  # type: ignore[method-assign]  # no CreateWriteStream
        sender = made.writer_for(DEST, TableLayout.of([SchemaField("id", "INT64")])).sender
        assert sender._slots is made.slots
    finally:
        made.close()


def test_closing_ends_a_lookup_in_flight_without_handing_it_to_the_metadata_threads() -> None:
    """The lookup channel closes after the metadata threads: a lookup it cancels fails its
    table as closed, instead of starting a REST lookup of a writer that is gone."""
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        made = BigQueryWriterFactory(
            sink_name="s",
            resolver=None,
            serializer=BigQuerySerializer.of(),
            options=BigQueryWriterOptions(),
            storage_endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}",
            rest_endpoint="http://127.0.0.1:2",
        )
        made.open(SubtaskInfo("s", 0, 1))
        try:
            assert made.stream_lookups is not None
            layout = made.stream_lookups.layout(DEST)
            time.sleep(0.3)
            assert not layout.done()  # in flight
        finally:
            made.close()
        with pytest.raises(WriteError, match="closed before its lookup ended"):
            layout.result(timeout=10)
