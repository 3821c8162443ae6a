"""Event-loop threads (``AsyncChannel``) that unit tests open, closed after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyflink_gcp.core.aio import AsyncChannel

#: The event loops a test opened, closed (and let go) by :func:`close_loops`.
LOOPS: list[AsyncChannel] = []


@pytest.fixture
def close_loops() -> Iterator[None]:
    """Close the loops a test opened, and let go of them before the next test."""
    yield
    while LOOPS:
        LOOPS.pop().close()
