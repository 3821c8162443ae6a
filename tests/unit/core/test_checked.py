"""The bounded LRU of destination names a subtask has checked, and the check that does not block.

The pending check's first attempt is a plain future the test answers from a thread of its own,
the way gRPC answers a started call on its polling thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames, PendingCheck


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
