"""The bounded LRU of destination names a subtask has checked."""

from __future__ import annotations

import threading

import pytest

from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames


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
