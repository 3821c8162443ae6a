"""The processing thread's waits on a table's sender end even when another thread never brings
what they wait for: an answer, the end of a backoff, a lookup, a step (no emulator; the
connections and timers are scripted, and the waits' margins are cut to nothing)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from pyflink_gcp.bigquery import sender_waits
from pyflink_gcp.bigquery.client import AppendConnection
from pyflink_gcp.bigquery.sender import Batch, TableSender
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core import retry as retries
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.retry import RetryPolicy
from tests.unit.bigquery.test_sender import (
    ENCODER_SCHEMA,
    FakeService,
    Unavailable,
    _encoded,
    sender,
)


@pytest.fixture(autouse=True)
def no_margins(monkeypatch: Any) -> None:
    monkeypatch.setattr(retries, "STALL_MARGIN_S", 0.0)
    monkeypatch.setattr(sender_waits, "CHECK_EVERY_S", 0.01)


def settled(s: TableSender, within_s: float = 10.0) -> Any:
    """``s.settle()``'s result (or error) on a thread of its own: a regression fails the test
    rather than hanging the suite."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(s.settle())
        except Exception as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within_s)
    assert outcome, f"settle was still waiting after {within_s} s"
    return outcome[0]


class Silent:
    """A connection that loses every request; ``abort`` answers them with an error, unless it
    loses that too."""

    retiring = False

    def __init__(self, on_answer: Any, answers_abort: bool) -> None:
        self.on_answer = on_answer
        self.answers_abort = answers_abort

    def send(self, request: Any) -> None:
        pass

    def abort(self) -> None:
        if self.answers_abort:
            self.on_answer(Unavailable())

    def close(self) -> None:
        pass


@pytest.mark.parametrize("answers_abort", [True, False], ids=["abort-answers", "abort-lost"])
def test_a_connection_that_never_answers_has_its_requests_sent_again(answers_abort: bool) -> None:
    opened: list[Any] = []

    def connect(stream: str, layout: Any, on_answer: Any) -> Any:
        if opened:
            connection: Any = AppendConnection(FakeService(), stream, 5.0, on_answer)
        else:
            connection = Silent(on_answer, answers_abort)
        opened.append(connection)
        return connection

    s = sender(None, TableLayout.of(ENCODER_SCHEMA), connect=connect, connection_timeout_s=0.05)
    s.submit(_encoded([7]))
    assert settled(s) == []
    assert s.rows_appended == 1 and len(opened) == 2


def test_a_connection_that_never_answers_fails_the_sender_at_the_retry_deadline() -> None:
    s = sender(
        None,
        TableLayout.of(ENCODER_SCHEMA),
        connect=lambda stream, layout, on_answer: Silent(on_answer, False),
        connection_timeout_s=0.05,
    )
    s.submit(_encoded([7]))
    error = settled(s)
    assert isinstance(error, WriteError)
    assert "p.d.t" in str(error) and "DEADLINE_EXCEEDED" in str(error)


class LostTimers:
    """Timers that never run what they are given."""

    def __init__(self) -> None:
        self.given = 0

    def call_later(self, delay_s: float, fn: Any) -> None:
        self.given += 1


def test_a_backoff_whose_timer_never_fires_ends_once_it_is_past_due() -> None:
    service, timers = FakeService(busy=1), LostTimers()
    s = sender(service, TableLayout.of(ENCODER_SCHEMA), timers=timers)
    s.submit(_encoded([3]))
    assert settled(s) == []
    assert timers.given == 1 and service.committed == [3] and s.requests_sent == 2


def test_a_lookup_that_never_ends_fails_the_sender_naming_the_table() -> None:
    never: Future[TableLayout] = Future()
    retry = RetryPolicy(
        initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=0.1, quota_deadline_s=0.1
    )
    s = sender(FakeService(), never, retry=retry, connection_timeout_s=0.05)
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    error = settled(s)
    assert isinstance(error, WriteError)
    assert "p.d.t" in str(error) and "lookup has not ended" in str(error)
    assert s.requests_sent == 0


def test_a_step_that_never_ends_on_another_thread_fails_the_sender() -> None:
    lookup: Future[TableLayout] = Future()
    release = threading.Event()

    def connect(stream: str, layout: Any, on_answer: Any) -> Any:
        release.wait(10.0)  # a step blocked on something that never comes
        return Silent(on_answer, True)

    s = sender(None, lookup, connect=connect, connection_timeout_s=0.05)
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    # The lookup's end runs the steps on its own thread, which blocks in ``connect``.
    threading.Thread(target=lookup.set_result, args=(TableLayout.of(ENCODER_SCHEMA),)).start()
    try:
        error = settled(s)
    finally:
        release.set()
    assert isinstance(error, WriteError)
    assert "p.d.t" in str(error) and "has not ended" in str(error)
