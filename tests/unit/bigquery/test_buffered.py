"""BUFFERED streams: the offsets of appends, and what a commit does per stream."""

from __future__ import annotations

from typing import Any

import pytest

from pyflink_gcp.bigquery import buffered
from pyflink_gcp.bigquery.buffered import (
    STALE,
    BufferedStreamCommitter,
    RateLimiter,
    StreamCommit,
    StreamOffsets,
)
from pyflink_gcp.bigquery.sender import Batch
from pyflink_gcp.core.retry import RetryPolicy


def batch(n: int) -> Batch:
    return Batch(None, list(range(n)), list(range(n)), False)


def test_offsets_follow_the_requests_in_the_order_they_are_sent() -> None:
    offsets = StreamOffsets()
    a, b, c = batch(3), batch(2), batch(4)
    assert [offsets.assign(x) for x in (a, b, c)] == [0, 3, 5]
    for x in (a, b, c):
        offsets.confirm(x)
    assert offsets.appended == 9
    assert offsets.committable("p.d.t", "s", finalize=False) == StreamCommit("p.d.t", "s", 8)
    assert offsets.committable("p.d.t", "s", finalize=False) is None  # nothing new


def test_a_refused_request_gives_back_its_offset_and_stales_the_ones_sent_after_it() -> None:
    offsets = StreamOffsets()
    a, b, c = batch(3), batch(2), batch(4)
    for x in (a, b, c):
        offsets.assign(x)
    offsets.confirm(a)
    offsets.refuse(b, [c])
    assert b.offset is None and c.offset == STALE and offsets.next == 3
    # Sent again, in the order they come back: new offsets from the refused one on.
    assert offsets.assign(c) == 3 and offsets.assign(b) == 7


def test_a_request_re_sent_after_a_lost_connection_keeps_its_offset() -> None:
    offsets = StreamOffsets()
    a = batch(3)
    offsets.assign(a)
    assert offsets.assign(a) == 0 and offsets.next == 3


def test_a_closed_writer_without_new_rows_only_finalizes() -> None:
    offsets = StreamOffsets()
    assert offsets.committable("p.d.t", "s", finalize=True) == StreamCommit("p.d.t", "s", -1, True)


class Calls:
    """Records the stream calls a commit makes (bookkeeping only)."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, int]] = []

    def flush(self, commit: StreamCommit) -> None:
        self.made.append(("flush", commit.stream, commit.offset))

    def finalize(self, commit: StreamCommit) -> None:
        self.made.append(("finalize", commit.stream, commit.offset))


def committer(monkeypatch: pytest.MonkeyPatch) -> tuple[BufferedStreamCommitter, Calls]:
    calls = Calls()
    monkeypatch.setattr(buffered, "open_storage_channel", lambda endpoint: _Channel())
    monkeypatch.setattr(buffered, "StreamCalls", lambda *args: calls)
    c = BufferedStreamCommitter(
        sink_name="s", storage_endpoint="http://127.0.0.1:1", retry=RetryPolicy(), threads=2
    )
    from pyflink_gcp.core import SubtaskInfo

    c.open(SubtaskInfo("s"))
    return c, calls


class _Channel:
    def close(self) -> None:
        pass


def test_a_commit_flushes_each_stream_once_to_its_highest_offset(monkeypatch: Any) -> None:
    c, calls = committer(monkeypatch)
    c.commit(
        [
            StreamCommit("p.d.a", "A", 9),
            StreamCommit("p.d.b", "B", 4),
            StreamCommit("p.d.a", "A", 19),  # a later checkpoint's, after an aborted one
            StreamCommit("p.d.c", "C", -1, finalize=True),
        ],
        7,
        restored=False,
    )
    assert sorted(calls.made) == [("finalize", "C", -1), ("flush", "A", 19), ("flush", "B", 4)]
    c.close()


def test_restored_streams_are_finalized_after_their_flush(monkeypatch: Any) -> None:
    c, calls = committer(monkeypatch)
    c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=True)
    assert calls.made == [("flush", "A", 9), ("finalize", "A", 9)]
    c.close()


def test_the_rate_limiter_spaces_acquisitions(monkeypatch: Any) -> None:
    slept: list[float] = []
    now = [100.0]
    monkeypatch.setattr(buffered.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(buffered.time, "sleep", slept.append)
    limiter = RateLimiter(4.0)
    for _ in range(3):
        limiter.acquire()
    assert slept == [0.25, 0.5]
