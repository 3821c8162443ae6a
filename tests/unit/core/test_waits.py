"""LazyCondition: a lock until a thread waits; a condition over it while threads wait."""

from __future__ import annotations

import sys
import threading
import time

from pyflink_gcp.core.waits import LazyCondition


def test_no_condition_is_built_until_a_thread_waits() -> None:
    cond = LazyCondition()
    with cond:
        cond.notify_all()  # nobody waits: nothing to build, nothing to wake
    assert cond._cond is None and cond.waiting == 0
    assert not hasattr(cond, "__dict__")
    assert sys.getsizeof(cond) < sys.getsizeof(threading.Condition()) + 100


def test_a_wait_times_out_with_false_and_leaves_no_condition() -> None:
    cond = LazyCondition()
    with cond:
        assert cond.wait(0.01) is False
    assert cond._cond is None and cond.waiting == 0


def test_every_waiter_is_woken_and_the_last_one_out_drops_the_condition() -> None:
    cond = LazyCondition()
    ready = threading.Barrier(3)
    woken: list[bool] = []
    flag = [False]

    def waiter() -> None:
        ready.wait()
        with cond:
            while not flag[0]:
                assert cond.wait(5)
            woken.append(True)

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for t in threads:
        t.start()
    ready.wait()
    deadline = time.monotonic() + 5
    while cond.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    with cond:
        assert cond.waiting == 2 and cond._cond is not None
        flag[0] = True
        cond.notify_all()
    for t in threads:
        t.join(5)
    assert woken == [True, True]
    assert cond._cond is None and cond.waiting == 0


def test_a_wait_releases_a_reentrant_hold_entirely() -> None:
    cond = LazyCondition()  # an RLock, as threading.Condition's default
    done = threading.Event()

    def notifier() -> None:
        with cond:  # reachable only if the waiter released both levels of its hold
            done.set()
            cond.notify_all()

    with cond, cond:
        threading.Thread(target=notifier).start()
        while not done.is_set():
            assert cond.wait(5)
    assert done.is_set()


def test_a_plain_lock_can_be_given() -> None:
    lock = threading.Lock()
    cond = LazyCondition(lock)
    with cond:
        assert lock.locked()
        assert cond.wait(0) is False
    assert not lock.locked()
