"""QuotaWindow: halves at quota errors, grows back with successes, bounds slots held."""

from __future__ import annotations

import logging
import threading

import pytest

from pyflink_gcp.core.quota import QuotaWindow


def test_the_window_starts_at_its_maximum_and_successes_do_not_raise_it() -> None:
    window = QuotaWindow(8)
    for _ in range(100):
        window.on_success()
    assert window.limit == 8 and window.quota_errors == 0


def test_each_quota_error_halves_the_window_down_to_one() -> None:
    window = QuotaWindow(256)
    limits = []
    for _ in range(10):
        window.on_quota_error()
        limits.append(window.limit)
    assert limits == [128, 64, 32, 16, 8, 4, 2, 1, 1, 1]
    assert window.quota_errors == 10 and window.reductions == 8


def test_a_window_not_in_full_use_halves_from_what_was_in_flight() -> None:
    # A sink with 6 of its 256 requests in flight slows down at once, not after 6 halvings.
    window = QuotaWindow(256)
    window.on_quota_error(in_flight=6)
    assert window.limit == 3
    window.on_quota_error(in_flight=100)  # never grows by a quota error
    assert window.limit == 1


def test_successes_grow_the_window_by_about_one_per_window_of_successes() -> None:
    window = QuotaWindow(16)
    for _ in range(5):
        window.on_quota_error()
    assert window.limit == 1
    window.on_success()  # 1 + 1/1
    assert window.limit == 2
    window.on_success()
    assert window.limit == 2  # 2.5
    window.on_success()
    assert window.limit == 2  # 2.9
    window.on_success()
    assert window.limit == 3
    for _ in range(1_000):
        window.on_success()
    assert window.limit == 16  # never past the maximum


def test_the_first_reduction_warns_and_the_return_to_full_size_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    window = QuotaWindow(2, "sink 's': Publish requests")
    with caplog.at_level(logging.INFO, logger="pyflink_gcp.quota"):
        window.on_quota_error()
        window.on_quota_error()  # already at 1: no reduction, nothing logged
        for _ in range(3):
            window.on_success()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages[0][0] == logging.WARNING
    assert "sink 's': Publish requests: quota error" in messages[0][1]
    assert "1 in flight at most, was 2" in messages[0][1]
    assert messages[-1] == (logging.INFO, "sink 's': Publish requests: back to 2 in flight")
    assert len(messages) == 2


def test_a_maximum_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="maximum >= 1"):
        QuotaWindow(0)


def test_slots_are_bounded_by_the_current_limit() -> None:
    window = QuotaWindow(2)
    window.acquire()
    window.acquire()
    assert window.in_use == 2
    window.release()
    window.on_quota_error()  # limit 1, one slot held: the next acquire waits
    acquired = threading.Event()

    def take() -> None:
        with window.slot():
            acquired.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    assert not acquired.wait(0.2)  # still blocked (a wait, not a timing measurement)
    window.release()
    assert acquired.wait(10)
    thread.join(10)
    assert window.in_use == 0


def test_growth_wakes_a_thread_waiting_for_a_slot() -> None:
    window = QuotaWindow(2)
    window.on_quota_error()
    window.acquire()
    acquired = threading.Event()

    def take() -> None:
        window.acquire()
        acquired.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    assert not acquired.wait(0.2)
    window.on_success()  # limit 1 -> 2: room for the waiting thread
    assert acquired.wait(10)
    thread.join(10)
    assert window.in_use == 2 and "limit 2/2" in repr(window)
