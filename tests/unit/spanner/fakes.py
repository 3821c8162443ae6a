"""Bookkeeping stand-ins for the Spanner unit tests: a schema and a fake GAPIC client.

The fake only records what the real code sends (sessions, commits, queries) and fails on demand;
everything it is handed is built by the sink's own code. The emulator tests
(``tests/integration/spanner``) cover the real service.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.types import CommitRequest
from google.protobuf import struct_pb2

from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerWriterOptions
from pyflink_gcp.spanner.schema import (
    COLUMNS_SQL,
    INDEX_COLUMNS_SQL,
    TABLES_SQL,
    DatabaseSchema,
    read_schema,
)
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory

DB = DatabaseDestination.of("p", "inst", "db")

#: INFORMATION_SCHEMA rows of a database with Events (two secondary indexes, a generated
#: column), Audit (no index), sales.Orders (a composite key) and a view.
ROWS: dict[str, list[list[Any]]] = {
    TABLES_SQL: [["", "Events"], ["", "Audit"], ["sales", "Orders"]],
    COLUMNS_SQL: [
        ["", "Events", "id", "INT64", "NEVER"],
        ["", "Events", "kind", "STRING(16)", "NEVER"],
        ["", "Events", "score", "FLOAT64", "NEVER"],
        ["", "Events", "n", "INT64", "NEVER"],
        ["", "Events", "kind_upper", "STRING(16)", "ALWAYS"],
        ["", "Audit", "id", "INT64", "NEVER"],
        ["", "Audit", "who", "STRING(32)", "NEVER"],
        ["", "SomeView", "id", "INT64", "NEVER"],
        ["sales", "Orders", "region", "STRING(8)", "NEVER"],
        ["sales", "Orders", "num", "INT64", "NEVER"],
    ],
    INDEX_COLUMNS_SQL: [
        ["", "Events", "PRIMARY_KEY", "PRIMARY_KEY", "id", "1"],
        ["", "Events", "ByKind", "INDEX", "kind", "1"],
        ["", "Events", "ByKind", "INDEX", "score", None],  # STORING
        ["", "Events", "ByN", "INDEX", "n", "1"],
        ["", "Audit", "PRIMARY_KEY", "PRIMARY_KEY", "id", "1"],
        ["sales", "Orders", "PRIMARY_KEY", "PRIMARY_KEY", "num", "2"],
        ["sales", "Orders", "PRIMARY_KEY", "PRIMARY_KEY", "region", "1"],
    ],
}


def schema() -> DatabaseSchema:
    return read_schema(lambda sql: ROWS[sql])


def _value(v: Any) -> struct_pb2.Value:
    if v is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    return struct_pb2.Value(string_value=str(v))


class FakeApi:
    """Stands in for the GAPIC client: records sessions and commits, fails on demand."""

    def __init__(self, fail: Any = None) -> None:
        self.fail = fail  # (request_pb) -> exception or None
        self.commits: list[Any] = []
        self.sessions = 0
        self.deleted: list[str] = []
        self.queries: list[tuple[str, str]] = []
        #: The request metadata of every commit attempt.
        self.metadata: list[Any] = []
        #: (sql) -> exception or None, for execute_sql.
        self.fail_query: Any = None
        #: The ``retry`` and ``timeout`` of every call: the library's default retry must never
        #: run (it waits outside the sink's deadline).
        self.calls: list[tuple[str, Any, float]] = []

    def create_session(self, **kwargs: Any) -> Any:
        self.calls.append(("create_session", kwargs.get("retry", "default"), kwargs["timeout"]))
        self.sessions += 1
        return SimpleNamespace(name=f"sessions/{self.sessions}")

    def delete_session(self, name: str, **kwargs: Any) -> None:
        self.calls.append(("delete_session", kwargs.get("retry", "default"), kwargs["timeout"]))
        self.deleted.append(name)

    def execute_sql(
        self, request: dict[str, str], timeout: float, metadata: Any, retry: Any = "default"
    ) -> Any:
        self.calls.append(("execute_sql", retry, timeout))
        self.queries.append((request["session"], request["sql"]))
        if self.fail_query is not None:
            exc = self.fail_query(request["sql"])
            if exc is not None:
                raise exc
        rows = [
            struct_pb2.ListValue(values=[_value(v) for v in row]) for row in ROWS[request["sql"]]
        ]
        return SimpleNamespace(_pb=SimpleNamespace(rows=rows))

    def commit(self, request: Any, retry: Any, timeout: float, metadata: Any) -> None:
        self.calls.append(("commit", retry, timeout))
        pb = CommitRequest.pb(request)
        self.metadata.append(metadata)
        if self.fail is not None:
            exc = self.fail(pb)
            if exc is not None:
                raise exc
        copy = type(pb)()
        copy.CopyFrom(pb)
        self.commits.append(copy)

    def rows(self) -> list[tuple[str, str, str]]:
        """(operation, table, first value) of every committed row or key, in commit order."""
        out = []
        for c in self.commits:
            for m in c.mutations:
                op = m.WhichOneof("operation")
                body = getattr(m, op)
                if op == "delete":
                    for key in body.key_set.keys:
                        out.append((op, body.table, key.values[0].string_value))
                    for _ in body.key_set.ranges:
                        out.append((op, body.table, "range"))
                else:
                    for row in body.values:
                        out.append((op, body.table, row.values[0].string_value))
        return out


def reject_kind(bad: str, exc: type[Exception] = gexc.FailedPrecondition) -> Any:
    """A ``FakeApi`` failure: rejects every commit holding a row whose second value is ``bad``."""

    def fail(pb: Any) -> Exception | None:
        for m in pb.mutations:
            body = getattr(m, m.WhichOneof("operation"))
            if m.WhichOneof("operation") != "delete":
                for row in body.values:
                    if len(row.values) > 1 and row.values[1].string_value == bad:
                        return exc(f"Cannot write {bad}")
        return None

    return fail


def make(
    fail: Any = None, *, fail_fast: bool = False, **options: Any
) -> tuple[SpannerWriterFactory, SpannerWriter, FakeApi]:
    """A factory connected to a fake API with :func:`schema`, and its writer."""
    factory = SpannerWriterFactory(
        sink_name="unit",
        database=DB,
        options=SpannerWriterOptions(**options),
        fail_fast=fail_fast,
    )
    api = FakeApi(fail)
    factory.connect(api)
    factory.schema = schema()
    return factory, factory.create_writer(DB), api


def event(i: int, **extra: Any) -> Mutation:
    return Mutation.insert_or_update("Events", {"id": i, "kind": "k", **extra})


def ids(api: FakeApi) -> list[int]:
    return [int(v) for op, _, v in api.rows() if op != "delete"]
