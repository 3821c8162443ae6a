"""Waiting for a condition in a test: one loop, which fails loudly and says what it waited for.

A file-local loop that returns quietly at its deadline lets the test go on past the moment it
meant to wait for, and fail later with a message about something else, or pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T], what: str, timeout_s: float = 60.0, interval_s: float = 0.2
) -> T:
    """Call ``check`` until it returns something truthy, and return that.

    Args:
        check: Polled every ``interval_s``; its first truthy answer is returned.
        what: What is waited for, in the failure's message.
        timeout_s: How long to wait.
        interval_s: The pause between calls.

    Raises:
        AssertionError: ``check`` gave nothing truthy within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
