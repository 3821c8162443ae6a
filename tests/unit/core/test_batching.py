"""OpenBatch (elements, bytes, age, cut) and InFlightWindow (bound, callbacks, settle)."""

from __future__ import annotations

import inspect
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from pyflink_gcp.core import batching
from pyflink_gcp.core.batching import InFlightWindow, OpenBatch, Slots, Timers
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow

# -- OpenBatch ---------------------------------------------------------------------------------


def test_an_empty_batch_is_never_due_and_its_age_starts_with_the_first_element() -> None:
    batch: OpenBatch[str] = OpenBatch(max_elements=3)
    assert batch.since == math.inf and not batch.is_due(time.monotonic()) and not batch
    before = time.monotonic()
    batch.append("a", 10)
    first = batch.since
    assert before <= first <= time.monotonic() and batch.is_due(first)
    assert not batch.is_due(first - 1)
    batch.append("b", 5)
    assert batch.since == first and len(batch) == 2 and batch.bytes == 15


def test_append_says_full_at_the_element_or_byte_limit() -> None:
    by_count: OpenBatch[int] = OpenBatch(max_elements=2)
    assert by_count.append(1) is False
    assert by_count.append(2) is True and by_count.is_full
    by_bytes: OpenBatch[int] = OpenBatch(max_bytes=100)
    assert by_bytes.append(1, 60) is False
    assert not by_bytes.fits(41) and by_bytes.fits(40)
    assert by_bytes.append(2, 40) is True


def test_an_empty_batch_fits_an_element_over_the_byte_limit() -> None:
    batch: OpenBatch[int] = OpenBatch(max_bytes=10)
    assert batch.fits(1000)
    assert batch.append(1, 1000) is True


def test_cut_takes_the_elements_in_order_and_resets_the_batch() -> None:
    batch: OpenBatch[str] = OpenBatch(max_elements=10)
    for name in "abc":
        batch.append(name, 1)
    assert batch.cut() == ["a", "b", "c"]
    assert batch.elements == [] and batch.bytes == 0 and batch.since == math.inf
    assert batch.cut() == []


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        OpenBatch(max_elements=0)


# -- InFlightWindow ----------------------------------------------------------------------------


def done(result: object = None, error: BaseException | None = None) -> Future[object]:
    future: Future[object] = Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


def test_a_completion_frees_its_slot_and_keeps_its_results() -> None:
    window: InFlightWindow[str] = InFlightWindow(2)
    first: Future[list[str]] = Future()
    window.admit()
    window.add(first)
    assert window.outstanding == 1 and window.last is first and not window.is_clean
    first.set_result(["rejected"])
    assert window.outstanding == 0
    assert window.take_results() == ["rejected"] and window.is_clean


def test_admit_waits_for_a_slot_freed_by_another_thread() -> None:
    window: InFlightWindow[str] = InFlightWindow(1)
    pending: Future[list[str]] = Future()
    window.add(pending)
    timer = threading.Timer(0.1, pending.set_result, ([],))
    timer.start()
    start = time.monotonic()
    window.admit()
    assert time.monotonic() - start >= 0.09 and window.outstanding == 0
    timer.join()


def test_admit_gives_up_after_its_timeout_naming_the_window() -> None:
    window: InFlightWindow[str] = InFlightWindow(1, what="sink 's': Publish requests")
    window.add(Future())
    with pytest.raises(WriteError, match=r"sink 's': Publish requests: none of the 1 requests"):
        window.admit(timeout=0.05)


def test_fail_fast_raises_the_first_error_once_from_admit() -> None:
    window: InFlightWindow[str] = InFlightWindow(4, fail_fast=True)
    window.add(done(error=ValueError("first")))
    window.add(done(error=ValueError("second")))
    with pytest.raises(ValueError, match="first"):
        window.admit()
    window.admit()  # taken
    assert window.settle() is None


def test_without_fail_fast_the_error_waits_for_the_drain() -> None:
    window: InFlightWindow[str] = InFlightWindow(4)
    window.add(done(error=ValueError("first")))
    window.admit()
    with pytest.raises(ValueError, match="first"):
        window.drain()


def test_drain_waits_for_all_then_raises_the_first_error() -> None:
    window: InFlightWindow[str] = InFlightWindow(8)
    slow: Future[list[str]] = Future()
    window.add(done(error=RuntimeError("broken")))
    window.add(slow)
    threading.Timer(0.05, slow.set_result, (["late"],)).start()
    with pytest.raises(RuntimeError, match="broken"):
        window.drain(timeout=5)
    assert window.outstanding == 0 and slow.done()
    assert window.take_results() == ["late"]


def test_a_window_that_never_waits_builds_no_condition_and_has_no_dict() -> None:
    # One window per destination writer: at 10,000 destinations a condition (about 1.2 KB)
    # and an instance dict per window are tens of megabytes.
    window: InFlightWindow[str] = InFlightWindow(2)
    for _ in range(3):
        window.admit()
        window.add(done(["r"]))
    assert window.drain() == ["r", "r", "r"]
    assert window._waits._cond is None
    assert not hasattr(window, "__dict__")


def test_settle_with_nothing_in_flight_takes_the_error_without_waiting() -> None:
    window: InFlightWindow[str] = InFlightWindow(2)
    failed = window.add(done(error=ValueError("gone")))
    error = window.settle(timeout=0)
    assert isinstance(error, ValueError) and window._waits._cond is None
    assert window.last is failed  # kept: an ordered writer must not chain past a failure
    assert window.settle(timeout=0) is None


def test_a_settled_window_lets_go_of_its_last_request() -> None:
    window: InFlightWindow[str] = InFlightWindow(2)
    window.add(done(["r"]))
    assert window.last is not None
    assert window.drain() == ["r"] and window.last is None


def test_waits_are_woken_by_completions_and_leave_no_condition_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batching, "_RECHECK_S", 30.0)  # only a notify wakes a wait in time
    window: InFlightWindow[str] = InFlightWindow(1)
    for _ in range(2):
        pending: Future[list[str]] = Future()
        window.add(pending)
        timer = threading.Timer(0.05, pending.set_result, ([],))
        timer.start()
        start = time.monotonic()
        window.admit(timeout=5)
        assert time.monotonic() - start < 10  # woken by the completion, not by a recheck
        timer.join()
    assert window._waits._cond is None and window.outstanding == 0


def test_two_threads_waiting_at_once_are_both_woken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "_RECHECK_S", 30.0)
    window: InFlightWindow[str] = InFlightWindow(1)
    pending: Future[list[str]] = Future()
    window.add(pending)
    woken: list[float] = []

    def settle() -> None:
        window.settle(timeout=5)
        woken.append(time.monotonic())

    waiters = [threading.Thread(target=settle) for _ in range(2)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.05)
    completed = time.monotonic()
    pending.set_result([])
    for waiter in waiters:
        waiter.join()
    assert len(woken) == 2 and max(woken) - completed < 10
    assert window._waits._cond is None


def test_settle_gives_up_after_its_timeout() -> None:
    window: InFlightWindow[str] = InFlightWindow(8, what="w")
    window.add(Future())
    with pytest.raises(WriteError, match="w: 1 requests were still in flight"):
        window.settle(timeout=0.05)


def test_a_wait_that_sees_no_completion_for_stall_s_raises_naming_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batching, "_RECHECK_S", 0.01)
    window: InFlightWindow[str] = InFlightWindow(1, what="sink 's': commits", stall_s=0.1)
    window.add(Future())  # its completion is lost
    with pytest.raises(WriteError, match="sink 's': commits: none of the 1 requests in flight"):
        window.settle()
    with pytest.raises(WriteError, match="a completion was lost"):
        window.admit()  # full, and nothing frees the slot


def test_a_wait_longer_than_stall_s_goes_on_while_requests_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batching, "_RECHECK_S", 0.01)
    window: InFlightWindow[str] = InFlightWindow(8, stall_s=0.3)
    futures: list[Future[list[str]]] = [Future() for _ in range(6)]
    for future in futures:
        window.add(future)

    def complete_one_by_one() -> None:
        for future in futures:
            time.sleep(0.1)  # each well within stall_s, all together twice as long
            future.set_result(["done"])

    started = time.monotonic()
    threading.Thread(target=complete_one_by_one).start()
    assert window.drain() == ["done"] * 6
    assert time.monotonic() - started > 0.3


def test_a_cancelled_request_counts_as_failed() -> None:
    window: InFlightWindow[str] = InFlightWindow(2)
    future: Future[list[str]] = Future()
    window.add(future)
    future.cancel()
    assert window.outstanding == 0
    assert window.settle() is not None


def test_elements_and_bytes_bound_the_window_but_an_empty_window_admits_anything() -> None:
    window: InFlightWindow[str] = InFlightWindow(None, max_elements=10, max_bytes=100)
    window.admit(elements=50, size=5000)  # alone: admitted
    first: Future[list[str]] = Future()
    window.add(first, elements=6, size=10)
    assert window.outstanding_elements == 6 and window.outstanding_bytes == 10
    with pytest.raises(WriteError):
        window.admit(elements=5, size=10, timeout=0.05)  # 11 elements
    with pytest.raises(WriteError):
        window.admit(elements=1, size=91, timeout=0.05)  # 101 bytes
    window.admit(elements=4, size=90)
    first.set_result([])
    assert window.outstanding_elements == 0 and window.outstanding_bytes == 0


def test_a_quota_window_lowers_the_bound_and_on_done_sees_each_outcome() -> None:
    quota = QuotaWindow(4)
    outcomes: list[BaseException | None] = []
    window: InFlightWindow[str] = InFlightWindow(
        8, quota=quota, collect=False, on_done=outcomes.append
    )
    assert window.limit == 4
    quota.on_quota_error()
    quota.on_quota_error()
    assert window.limit == 1
    window.add(done(error=ValueError("quota")))
    window.add(done([]))
    assert len(outcomes) == 2 and isinstance(outcomes[0], ValueError) and outcomes[1] is None
    # Without collect, outcomes are not kept: the window only bounds.
    assert window.settle() is None and window.take_results() == []


def test_callbacks_from_many_threads_keep_the_counts_exact() -> None:
    window: InFlightWindow[int] = InFlightWindow(16)
    peak = [0]
    lock = threading.Lock()

    def request(i: int) -> list[int]:
        with lock:
            peak[0] = max(peak[0], window.outstanding)
        time.sleep(0.001)
        return [i] if i % 10 == 0 else []

    with ThreadPoolExecutor(max_workers=8) as pool:
        for i in range(500):
            window.admit()
            assert window.outstanding < 16
            window.add(pool.submit(request, i))
        results = window.drain(timeout=30)
    assert sorted(results) == list(range(0, 500, 10))
    assert window.outstanding == 0 and 1 <= peak[0] <= 16 and window.is_clean


# -- Slots and Timers ---------------------------------------------------------------------------


def test_slots_grant_waiters_in_arrival_order_on_the_releasing_thread() -> None:
    slots = Slots(2)
    granted: list[tuple[str, str]] = []

    def grant(key: str) -> Any:
        return lambda: granted.append((key, threading.current_thread().name))

    assert slots.acquire("a", grant("a")) and slots.acquire("b", grant("b"))
    assert not slots.acquire("c", grant("c")) and not slots.acquire("d", grant("d"))
    assert not slots.acquire("c", grant("c-again"))  # a key waits once
    assert (slots.held, slots.waiting) == (2, 2)
    releaser = threading.Thread(target=slots.release, name="releaser")
    releaser.start()
    releaser.join()
    assert granted == [("c", "releaser")] and (slots.held, slots.waiting) == (2, 1)
    assert slots.cancel("d") and not slots.cancel("d")
    slots.release()
    slots.release()
    assert granted == [("c", "releaser")] and slots.held == 0
    # A newcomer does not overtake a waiter.
    slots = Slots(1)
    assert slots.acquire("a", grant("a"))
    assert not slots.acquire("b", grant("b"))
    slots.release()
    assert not slots.acquire("e", grant("e")) and granted[-1][0] == "b"


def test_slots_grants_that_release_at_once_run_one_after_another_not_nested() -> None:
    slots = Slots(1)
    depths: list[int] = []

    def grant() -> None:
        depths.append(len(inspect.stack(0)))
        slots.release()  # a holder whose work ended at once

    assert slots.acquire("first", lambda: None)
    for n in range(3_000):
        assert not slots.acquire(n, grant)
    slots.release()  # without the queue of grants: 3,000 grants deep, past the recursion limit
    assert len(depths) == 3_000 and max(depths) - min(depths) == 0
    assert (slots.held, slots.waiting) == (0, 0)


def test_slots_a_grant_that_raises_does_not_keep_the_others_from_running() -> None:
    slots = Slots(1)
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        slots.release()
        raise RuntimeError("on_grant failed")

    assert slots.acquire("first", lambda: None)
    assert not slots.acquire("broken", broken)
    assert not slots.acquire("next", lambda: ran.append("next"))
    with pytest.raises(RuntimeError, match="on_grant failed"):
        slots.release()
    assert ran == ["broken", "next"] and slots.held == 1
    slots.release()  # the slot "next" holds
    assert slots.held == 0 and slots.acquire("later", lambda: None)


def test_slots_cancel_all_withdraws_every_waiter_in_arrival_order() -> None:
    slots = Slots(1)
    granted: list[str] = []
    assert slots.acquire("a", lambda: None)
    for key in "bcd":
        assert not slots.acquire(key, lambda key=key: granted.append(key))
    assert slots.cancel_all() == ["b", "c", "d"] and slots.waiting == 0
    slots.release()
    assert granted == [] and slots.held == 0


def test_slots_without_a_limit_grant_everything() -> None:
    slots = Slots(None)
    assert all(slots.acquire(n, lambda: None) for n in range(1_000))
    assert slots.waiting == 0


def test_timers_run_callbacks_in_due_order_on_one_thread_and_drop_them_once_closed() -> None:
    timers = Timers("test-timers")
    ran: list[tuple[int, str]] = []
    done = threading.Event()
    timers.call_later(0.05, lambda: (ran.append((2, threading.current_thread().name)), done.set()))
    timers.call_later(0.0, lambda: ran.append((1, threading.current_thread().name)))
    timers.call_later(0.01, lambda: 1 / 0)  # a failing callback does not stop the others
    assert done.wait(5.0)
    assert [n for n, _ in ran] == [1, 2] and {t for _, t in ran} == {"test-timers"}
    timers.call_later(0.05, lambda: ran.append((3, "")))
    timers.close()
    timers.call_later(0.0, lambda: ran.append((4, "")))
    time.sleep(0.1)
    assert len(ran) == 2
