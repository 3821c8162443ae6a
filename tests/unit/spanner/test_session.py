"""The subtask's session against a fake Spanner API: lifetime, renewal, schema reads, errors."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as gexc

from pyflink_gcp.core import DestinationNotFoundError, WriteError
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.spanner import session as session_module
from pyflink_gcp.spanner.schema import TABLES_SQL
from pyflink_gcp.spanner.session import Session
from tests.unit.spanner.fakes import DB, FakeApi


def open_session(api: FakeApi | None = None) -> tuple[Session, FakeApi]:
    api = api or FakeApi()
    retry = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02, deadline_s=0.1)
    return Session(api, DB, "unit", retry), api


def test_one_session_created_on_first_use_and_kept() -> None:
    s, api = open_session()
    assert api.sessions == 0
    assert s.name() == s.name() == "sessions/1"
    assert api.sessions == 1


def test_a_stale_session_is_replaced_and_an_idle_one_renewed(monkeypatch: Any) -> None:
    s, api = open_session()
    first = s.name()
    s.renew("sessions/other")  # not ours: kept
    assert s.name() == first
    s.renew(first)
    assert s.name() == "sessions/2"
    clock = {"now": 1_000.0}
    monkeypatch.setattr(session_module.time, "monotonic", lambda: clock["now"])
    s.name()
    clock["now"] += session_module.SESSION_MAX_IDLE_S + 1
    assert s.name() == "sessions/3"


def test_the_schema_is_read_in_the_session() -> None:
    s, api = open_session()
    schema = s.read_schema()
    assert schema.table_names() == ["Audit", "Events", "sales.Orders"]
    assert {session for session, _ in api.queries} == {"sessions/1"}


def test_a_missing_database_and_other_errors_are_clear(monkeypatch: Any) -> None:
    class NoDatabase(FakeApi):
        def create_session(self, **kwargs: Any) -> Any:
            raise gexc.NotFound("Database not found")

    s, _ = open_session(NoDatabase())
    with pytest.raises(DestinationNotFoundError, match="database .*db not found.*never creates"):
        s.name()

    s, api = open_session()
    api.fail_query = lambda sql: gexc.InvalidArgument("syntax") if sql == TABLES_SQL else None
    with pytest.raises(WriteError, match="only GoogleSQL-dialect databases"):
        s.read_schema()

    s, api = open_session()
    api.fail_query = lambda sql: gexc.ServiceUnavailable("down")
    with pytest.raises(WriteError, match="read the schema.*still failing"):
        s.read_schema()


def test_close_deletes_the_session_once() -> None:
    s, api = open_session()
    s.close()
    assert api.deleted == []  # never created
    name = s.name()
    s.close()
    s.close()
    assert api.deleted == [name]


def test_every_call_is_one_attempt_without_the_library_retry_bounded_by_the_deadline() -> None:
    api = FakeApi()
    s = Session(api, DB, "unit", RetryPolicy(deadline_s=8.0), "127.0.0.1:9010")
    s.read_schema()
    s.close()
    kinds = {kind for kind, _, _ in api.calls}
    assert kinds == {"create_session", "execute_sql", "delete_session"}
    assert all(retry is None for _, retry, _ in api.calls), api.calls
    # Capped at the 8 s retry deadline; deletion at close keeps its own short timeout.
    assert {(kind, timeout) for kind, _, timeout in api.calls} == {
        ("create_session", 8.0),
        ("execute_sql", 8.0),
        ("delete_session", 1.0),
    }


def test_an_unreachable_service_is_named_with_its_endpoint() -> None:
    class Refused(FakeApi):
        def create_session(self, **kwargs: Any) -> Any:
            raise gexc.ServiceUnavailable("failed to connect to all addresses")

    retry = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02, deadline_s=0.1)
    s = Session(Refused(), DB, "orders-spanner", retry, "127.0.0.1:9010")
    with pytest.raises(WriteError) as err:
        s.name()
    assert str(err.value).startswith(
        f"sink 'orders-spanner': create a session in {DB} at 127.0.0.1:9010: still failing"
    )
