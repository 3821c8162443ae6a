"""The bounded LRU of destination names a subtask has checked, and the check that does not block.

The pending check's first attempt is a plain future the test answers from a thread of its own,
the way gRPC answers a started call on its polling thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from pyflink_gcp.core.checked import (
    CHECKED_NAMES_LIMIT,
    CheckCalls,
    CheckedNames,
    PendingCheck,
)
from pyflink_gcp.core.errors import WriteError


def test_the_least_recently_used_name_is_forgotten_past_the_limit():
    names = CheckedNames(limit=2)
    names.add("a")
    names.add("b")
    assert "a" in names  # a is now the most recently used
    names.add("c")
    assert "b" not in names and "a" in names and "c" in names
    assert len(names) == 2 and names.forgotten == 1


def test_discard_and_clear_forget_names():
    names = CheckedNames()
    assert names.limit == CHECKED_NAMES_LIMIT
    names.add("a")
    names.add("b")
    names.discard("a")
    names.discard("missing")
    assert "a" not in names and "b" in names
    names.clear()
    assert len(names) == 0


def test_adds_from_many_threads_keep_the_bound():
    names = CheckedNames(limit=100)

    def add(prefix):
        for i in range(1_000):
            names.add(f"{prefix}-{i}")
            _ = f"{prefix}-{i // 2}" in names

    threads = [threading.Thread(target=add, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names) == 100 and names.forgotten == 3_900


def test_the_limit_must_be_positive():
    with pytest.raises(ValueError):
        CheckedNames(limit=0)


# -- PendingCheck -----------------------------------------------------------------------------


class Missing(Exception):
    """The full check's verdict on a destination that does not exist."""


class Destination:
    """What a pending check is given: its first attempt, the full check, the known names."""

    def __init__(self, exists: bool) -> None:
        self.call: Future = Future()
        self.known = CheckedNames(10)
        self.exists = exists
        self.full_checks = 0

    def full_check(self) -> None:
        self.full_checks += 1
        if not self.exists:
            raise Missing("orders does not exist")
        self.known.add("orders")

    def check(self) -> PendingCheck:
        return PendingCheck(self.call, self.full_check, lambda: self.known.add("orders"))

    def answer_on_a_thread(self, ok: bool) -> None:
        def run():
            if ok:
                self.call.set_result({"name": "orders"})
            else:
                self.call.set_exception(ConnectionError("unavailable"))

        thread = threading.Thread(target=run, name="poller")
        thread.start()
        thread.join()


def record(events, what):
    return lambda: events.append((what, threading.current_thread().name))


def test_a_first_attempt_that_succeeds_calls_found_on_the_answering_thread():
    destination = Destination(exists=True)
    check = destination.check()
    events: list = []
    check.then(record(events, "found"), record(events, "otherwise"))
    assert events == [] and not check.succeeded()  # nothing waited for the answer
    destination.answer_on_a_thread(ok=True)
    assert events == [("found", "poller")]
    assert check.succeeded() and "orders" in destination.known
    assert destination.full_checks == 0


def test_a_first_attempt_that_fails_hands_over_to_the_full_check_once():
    destination = Destination(exists=False)
    check = destination.check()
    events: list = []
    check.then(record(events, "found"), record(events, "otherwise"))
    destination.answer_on_a_thread(ok=False)
    assert events == [("otherwise", "poller")] and destination.full_checks == 0
    with pytest.raises(Missing, match="orders does not exist"):
        check.wait()  # on a thread that may block: the full check, with its errors
    assert check.failed() and not check.succeeded() and destination.full_checks == 1
    with pytest.raises(Missing):
        check.wait()  # settled: raised again, not checked again
    assert destination.full_checks == 1


def test_a_failed_first_attempt_of_a_destination_that_exists_settles_as_found():
    destination = Destination(exists=True)
    check = destination.check()
    destination.answer_on_a_thread(ok=False)  # a transient error, say
    check.wait()
    assert check.succeeded() and destination.full_checks == 1


def test_an_answered_check_runs_its_continuation_at_once_on_the_caller():
    destination = Destination(exists=True)
    check = destination.check()
    destination.call.set_result({"name": "orders"})
    events: list = []
    check.then(record(events, "found"), record(events, "otherwise"))
    assert events == [("found", threading.current_thread().name)]


def test_a_cancelled_first_attempt_counts_as_failed_without_raising():
    destination = Destination(exists=True)
    check = destination.check()
    destination.call.cancel()
    assert not check.succeeded()
    events: list = []
    check.then(record(events, "found"), record(events, "otherwise"))
    assert [what for what, _ in events] == ["otherwise"]


# -- CheckCalls: a bounded number of first attempts in flight ---------------------------------


def test_at_most_the_limit_of_calls_are_in_flight_and_the_rest_start_in_order():
    calls = CheckCalls(limit=2)
    started: list[Future[str]] = []

    def begin(i: int) -> Future[str]:
        future: Future[str] = Future()
        future.i = i  # type: ignore[attr-defined]
        started.append(future)
        return future

    queued = [calls.start(lambda i=i: begin(i)) for i in range(5)]
    assert [f.i for f in started] == [0, 1]  # type: ignore[attr-defined]
    assert calls.in_flight == 2 and calls.queued == 3 and calls.max_queued == 3
    assert not queued[2].done()
    started[1].set_result("b")  # a completion frees a slot and starts the next queued call
    assert [f.i for f in started] == [0, 1, 2]  # type: ignore[attr-defined]
    assert queued[1].done() and queued[1].result() == "b"
    while any(not f.done() for f in started):  # each completion starts the next
        next(f for f in started if not f.done()).set_result("x")
    assert len(started) == 5 and all(c.done() for c in queued)
    assert calls.in_flight == 0 and calls.queued == 0


def test_calls_that_end_at_once_start_thousands_without_recursion():
    calls = CheckCalls(limit=1)

    def answered() -> Future[int]:
        future: Future[int] = Future()
        future.set_result(1)
        return future

    queued = [calls.start(answered) for _ in range(5000)]
    assert all(c.done() and c.result() == 1 for c in queued)
    assert calls.in_flight == 0


def test_queued_calls_that_end_at_once_start_one_after_another_when_a_slot_frees():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    calls.start(lambda: first)

    def answered() -> Future[int]:
        future: Future[int] = Future()
        future.set_result(1)
        return future

    queued = [calls.start(answered) for _ in range(5000)]
    assert calls.queued == 5000 and calls.max_queued == 5000
    first.set_result(0)  # each queued call frees its slot as it starts: 5,000 grants in a row
    assert all(c.done() and c.result() == 1 for c in queued)
    assert (calls.in_flight, calls.queued) == (0, 0)


def test_a_call_started_after_close_ends_at_once():
    calls = CheckCalls(limit=4, what="sink 's'")
    calls.close()
    began: list[int] = []
    call = calls.start(lambda: began.append(1))
    assert call.done() and began == [] and calls.in_flight == 0
    assert isinstance(call.exception(timeout=0), WriteError)


def test_a_call_that_cannot_start_ends_with_the_error_and_frees_its_slot():
    calls = CheckCalls(limit=1)

    def broken() -> Future[int]:
        raise RuntimeError("channel closed")

    failed = calls.start(broken)
    assert failed.done() and isinstance(failed.exception(), RuntimeError)
    with pytest.raises(RuntimeError, match="channel closed"):
        failed.result()
    ok: Future[int] = Future()
    assert calls.start(lambda: ok) is not None and calls.in_flight == 1


def test_callbacks_added_before_the_start_run_once_the_call_ends_with_the_queued_call():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    second: Future[int] = Future()
    calls.start(lambda: first)
    queued = calls.start(lambda: second)
    seen: list[object] = []
    queued.add_done_callback(seen.append)
    first.set_result(0)  # starts the queued call
    assert seen == []
    second.set_result(2)
    assert seen == [queued]


def test_a_waiter_blocks_until_its_queued_call_started_and_answered():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    second: Future[int] = Future()
    calls.start(lambda: first)
    queued = calls.start(lambda: second)
    with pytest.raises(TimeoutError):
        queued.exception(timeout=0.05)  # not started yet
    threading.Timer(0.05, first.set_result, (0,)).start()
    threading.Timer(0.1, second.set_result, (2,)).start()
    assert queued.result(timeout=5) == 2


def test_close_ends_the_queued_calls_so_no_one_waits_for_them():
    calls = CheckCalls(limit=1, what="sink 's'")
    running: Future[int] = Future()
    calls.start(lambda: running)
    queued = calls.start(lambda: Future())
    calls.close()
    assert queued.done()
    error = queued.exception(timeout=1)
    assert isinstance(error, WriteError) and "sink 's'" in str(error)
    running.set_result(1)  # its completion starts nothing more
    assert calls.in_flight == 0


def test_a_pending_check_reads_a_queued_call_like_a_started_one():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    second: Future[int] = Future()
    calls.start(lambda: first)
    found: list[str] = []
    check = PendingCheck(calls.start(lambda: second), lambda: None, lambda: found.append("x"))
    outcomes: list[str] = []
    check.then(lambda: outcomes.append("found"), lambda: outcomes.append("otherwise"))
    assert not check.succeeded()
    first.set_result(0)
    second.set_result(1)
    assert outcomes == ["found"] and found == ["x"] and check.succeeded()


def test_a_queued_call_begins_with_its_arguments_only_when_it_starts():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    calls.start(lambda: first)
    begun: list[tuple[str, float]] = []

    def begin(name: str, timeout: float) -> Future[int]:
        begun.append((name, timeout))  # where a sink builds the call's request
        future: Future[int] = Future()
        future.set_result(len(name))
        return future

    queued = calls.start(begin, "orders", 5.0)
    assert begun == []  # queued: nothing built for it yet
    first.set_result(0)
    assert begun == [("orders", 5.0)] and queued.result(timeout=0) == 6


def test_a_callback_that_raises_does_not_keep_the_others_from_running():
    calls = CheckCalls(limit=1)
    first: Future[int] = Future()
    calls.start(lambda: first)
    second: Future[int] = Future()
    queued = calls.start(lambda: second)
    seen: list[str] = []

    def broken(_call: object) -> None:
        seen.append("broken")
        raise RuntimeError("callback failed")

    queued.add_done_callback(broken)
    queued.add_done_callback(lambda _call: seen.append("next"))
    first.set_result(0)
    second.set_result(2)  # concurrent.futures logs the callback's error, as gRPC would
    assert seen == ["broken", "next"]
    late: list[object] = []
    queued.add_done_callback(late.append)  # added after the end: runs at once
    assert late == [queued] and calls.in_flight == 0
