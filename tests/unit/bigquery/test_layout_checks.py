"""A sender whose layout was assumed from the serializer's declared schema, against a scripted
AppendRows stub whose table has columns of its own: what the table refuses of the assumed
layout sends the sender to the table's own layout, once, and never reaches the failure
handler or the retry deadline on the guess's word."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import grpc
from google.cloud.bigquery import SchemaField
from google.cloud.bigquery_storage_v1 import types

from pyflink_gcp.bigquery import RowFormat
from pyflink_gcp.bigquery.sender import Batch, TableSender
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core.retry import RetryPolicy
from tests.unit.bigquery.test_rows import decode
from tests.unit.bigquery.test_sender import DEST

Response = types.AppendRowsResponse.pb()
TABLE = [SchemaField("id", "INT64"), SchemaField("extra", "STRING")]


def assumed(fields: list[Any]) -> TableLayout:
    layout = TableLayout.of(fields, row_format=RowFormat.PROTO)
    layout.assumed = True
    return layout


class Table:
    """The service side of a table with ``columns``: a request whose writer schema has another
    column is refused whole (BigQuery's SCHEMA_MISMATCH_EXTRA_FIELDS); a row whose ``id`` is in
    ``bad`` is refused with a per-row error; the first ``refuse_connections`` connections end
    with ``status`` before any answer."""

    def __init__(
        self,
        columns: tuple[str, ...] = ("id", "extra"),
        bad: frozenset[int] = frozenset(),
        refuse_connections: int = 0,
        status: grpc.StatusCode = grpc.StatusCode.NOT_FOUND,
    ) -> None:
        self.columns = columns
        self.bad = bad
        self.refuse_connections = refuse_connections
        self.status = status
        self.committed: list[dict[str, Any]] = []
        self.answers: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, requests: Any, metadata: Any = None, timeout: Any = None) -> Any:
        with self._lock:
            refuse = self.refuse_connections > 0
            self.refuse_connections -= refuse
        return _Call(self, requests, refuse)

    def answer(self, request: Any) -> Any:
        descriptor = request.proto_rows.writer_schema.proto_descriptor
        extra = [f.name for f in descriptor.field if f.name not in self.columns]
        with self._lock:
            if extra:
                self.answers.append("schema")
                return Response(error={"code": 3, "message": f"no column {extra[0]}"})
            rows = [decode(descriptor, r) for r in request.proto_rows.rows.serialized_rows]
            bad = [i for i, row in enumerate(rows) if row.get("id") in self.bad]
            if bad:
                self.answers.append("rows")
                return Response(
                    error={"code": 3, "message": "rows rejected"},
                    row_errors=[{"index": i, "code": 1, "message": f"row {i} is bad"} for i in bad],
                )
            self.answers.append("ok")
            self.committed.extend(rows)
            return Response()


class _Failed(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status

    def __str__(self) -> str:
        return f"{self._status.name}: the connection ended"


class _Call:
    def __init__(self, table: Table, requests: Any, refuse: bool) -> None:
        self._table = table
        self._requests = requests
        self._refuse = refuse

    def __next__(self) -> Any:
        request = next(self._requests)
        if self._refuse:
            with self._table._lock:
                self._table.answers.append(self._table.status.name)
            raise _Failed(self._table.status)
        return self._table.answer(request)

    def cancel(self) -> bool:
        return True


class Checks:
    """The sender's ``check``: counts its calls and answers with the table's own layout."""

    def __init__(self, fields: list[Any] = TABLE) -> None:
        self.fields = fields
        self.calls = 0

    def __call__(self) -> Future[TableLayout]:
        self.calls += 1
        done: Future[TableLayout] = Future()
        done.set_result(TableLayout.of(self.fields, row_format=RowFormat.PROTO))
        return done


def sender(table: Table, layout: TableLayout, check: Checks | None) -> TableSender:
    return TableSender(
        DEST,
        layout,
        sink_name="test-sink",
        stub=table,
        retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=0.2),
        max_in_flight=2,
        max_request_bytes=100_000,
        connection_timeout_s=5.0,
        check=check,
    )


def rows(*ids: int, **values: Any) -> Batch:
    elements = [{"id": i, **values} for i in ids]
    return Batch(None, elements, list(ids), False)


def test_a_request_refused_for_a_column_the_table_lacks_is_sent_again_by_its_layout() -> None:
    table, check = Table(columns=("id",)), Checks([SchemaField("id", "INT64")])
    s = sender(table, assumed([SchemaField("id", "INT64"), SchemaField("name", "STRING")]), check)
    s.submit(rows(1, 2))
    s.submit(rows(3))

    assert s.settle() == []
    assert check.calls == 1
    assert sorted(r["id"] for r in table.committed) == [1, 2, 3]
    assert table.answers[0] == "schema" and table.answers[-2:] == ["ok", "ok"]


def test_a_row_the_assumed_layout_cannot_encode_is_encoded_by_the_tables() -> None:
    # The declaration lacks a column the rows carry: under UnknownFields.FAIL that would fail
    # the job, but the table has it.
    table, check = Table(), Checks()
    s = sender(table, assumed([SchemaField("id", "INT64")]), check)
    s.submit(rows(1))
    s.submit(rows(2, extra="x"))

    assert s.settle() == []
    assert check.calls == 1
    assert sorted((r["id"], r.get("extra")) for r in table.committed) == [(1, None), (2, "x")]


def test_rows_refused_again_by_the_tables_own_layout_reach_the_failure_handler() -> None:
    table, check = Table(bad=frozenset({2})), Checks()
    s = sender(table, assumed(TABLE), check)  # the declaration was right
    s.submit(rows(1, 2, 3))

    failed = s.settle()
    assert [(f.record_repr, f.reason) for f in failed] == [("2", "row 1 is bad")]
    assert check.calls == 1
    assert table.answers == ["rows", "rows", "ok"]
    assert sorted(r["id"] for r in table.committed) == [1, 3]


def test_a_missing_table_is_asked_for_not_retried_until_the_deadline() -> None:
    table, check = Table(refuse_connections=1), Checks()
    s = sender(table, assumed(TABLE), check)
    s.submit(rows(1))

    assert s.settle() == []
    assert check.calls == 1
    assert table.answers == ["NOT_FOUND", "ok"]


def test_a_transient_error_says_nothing_of_the_layout() -> None:
    table = Table(refuse_connections=1, status=grpc.StatusCode.UNAVAILABLE)
    check = Checks()
    s = sender(table, assumed(TABLE), check)
    s.submit(rows(1))

    assert s.settle() == []
    assert check.calls == 0
    assert table.answers == ["UNAVAILABLE", "ok"]


def test_a_layout_the_table_gave_is_never_checked() -> None:
    table, check = Table(bad=frozenset({1})), Checks()
    s = sender(table, TableLayout.of(TABLE, row_format=RowFormat.PROTO), check)
    s.submit(rows(1, 2))

    assert [f.record_repr for f in s.settle()] == ["1"]
    assert check.calls == 0
