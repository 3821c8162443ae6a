"""How the processing thread waits on a table's sender, and why that wait always ends.

The processing thread waits on a :class:`~pyflink_gcp.bigquery.sender.TableSender` in two
places: ``submit`` while the table has more queued than its window (backpressure) and
``settle`` until everything in flight was answered. Everything it waits for is brought by
another thread: an answer by the thread that reads the connection (the event loop's for a
shared connection), the end of a backoff by the subtask's timer thread, the table's lookup by
the event loop or a metadata thread. Each of those has a bound of its own (a call deadline, a
backoff's length, a retry deadline), but a wait that trusts them all is as long as the worst
hand-over: one completion lost between threads, and a flush waits for ever, the job with it.

So the wait keeps its own clock. Every step that ends on any thread wakes it; when none has
for longer than the bound of what it waits for, it acts on the thread it has:

=============================  ==========================================  =================
waiting for                    bound                                       then
=============================  ==========================================  =================
an answer to a request         the connection's call deadline + margin     the connection is
                                                                           aborted and the
                                                                           requests are lost:
                                                                           sent again after a
                                                                           backoff, within
                                                                           the retry deadline
the end of a backoff           its due time + margin                       the backoff ends
the table's lookup (or its     the retry and quota deadlines, two call     the sender fails,
BUFFERED stream's creation)    deadlines + margin                          naming the table
a step on another thread       the call deadline + margin                  the sender fails
=============================  ==========================================  =================

A wait for a connection slot (BUFFERED streams) has no bound here: it ends when another table
releases one, and each of those tables is bounded by its own waits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import grpc

from pyflink_gcp.core import retry as retries
from pyflink_gcp.core.errors import SinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.status import StatusError
from pyflink_gcp.core.waits import LazyCondition

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: How often a waiting thread looks at its clock when nothing wakes it.
CHECK_EVERY_S = 5.0
#: Why a connection's requests were given up on.
NO_ANSWER = "no AppendRows response within the connection's deadline"


class BoundedWaits:
    """The processing thread's waits on a table's sender (see the module docstring); mixed into
    :class:`~pyflink_gcp.bigquery.sender.TableSender`, whose state it reads under ``_cond``."""

    _cond: LazyCondition
    _what: str
    _timeout_s: float
    _retry: RetryPolicy
    _fatal: BaseException | None
    _closed: bool
    _busy: bool
    _paused: int
    _resume_due: float
    _in_flight: list[Any]
    _connection: Any
    _generation: int
    _layout_source: Any
    _stream_source: Future[str] | None

    def _action(self) -> str:
        raise NotImplementedError

    def _step(self) -> None:
        raise NotImplementedError

    def _on_answer(self, generation: int, answer: Any) -> None:
        raise NotImplementedError

    def _wait(self, done: Callable[[], bool]) -> None:
        """Until ``done()`` (or the sender failed or closed): run the steps there is work for
        on this thread, else wait for the other threads to bring some, for as long as what it
        waits for is bounded (the module docstring)."""
        while True:
            stall, connection, generation = "", None, 0
            with self._cond:
                since = time.monotonic()
                while self._fatal is None and not self._closed:
                    if not self._busy:
                        if done():
                            return
                        if self._action():
                            break
                    if self._cond.wait(CHECK_EVERY_S):
                        since = time.monotonic()  # a step ended: something moved
                        continue
                    stall = self._stalled(time.monotonic() - since)
                    if stall:
                        break
                else:
                    return
                if stall:
                    connection, generation = self._connection, self._generation
            if stall:
                self._unstick(stall, connection, generation, time.monotonic() - since)
            self._step()

    def _stalled(self, waited_s: float) -> str:
        """What the wait has waited for longer than its bound, if anything ('' if nothing);
        under ``_cond``. Beyond each bound, the wait lets the other threads bring what it waits
        for for :data:`~pyflink_gcp.core.retry.STALL_MARGIN_S` more before it acts itself."""
        margin_s = retries.STALL_MARGIN_S
        stuck_s = self._timeout_s + margin_s
        if self._busy:
            return "step" if waited_s > stuck_s else ""
        if self._in_flight:
            return "answer" if waited_s > stuck_s else ""
        if self._paused:
            return "backoff" if time.monotonic() > self._resume_due + margin_s else ""
        for source in (self._layout_source, self._stream_source):
            if isinstance(source, Future) and not source.done():
                # The lookup's call with all its retries, then the wait's own call and margin.
                bound = self._retry.stall_bound(self._timeout_s) + stuck_s
                return "lookup" if waited_s > bound else ""
        return ""

    def _unstick(self, stall: str, connection: Any, generation: int, waited_s: float) -> None:
        """Act on a wait that passed its bound (outside ``_cond``)."""
        if stall == "answer":
            _LOG.warning("%s: %s; sending its requests again", self._what, NO_ANSWER)
            if connection is not None:
                connection.abort()
            # The requests are lost whether or not the aborted connection ever answers them
            # (its answers, if any, belong to a generation that is over by then).
            self._on_answer(generation, StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, NO_ANSWER))
            return
        if stall == "backoff":
            _LOG.warning(
                "%s: a backoff's timer had not ended it %.0f s after it was due; ending it",
                self._what,
                time.monotonic() - self._resume_due,
            )
            with self._cond:
                self._paused = 0
            return
        reason = (
            "its table's lookup has not ended"
            if stall == "lookup"
            else "a step of its sender on another thread has not ended"
        )
        error = WriteError(f"{self._what}: {reason} in {waited_s:.0f} s; failing the sender")
        _LOG.error("%s", error)
        self._fail(error)

    def _fail(self, error: SinkError) -> None:
        with self._cond:
            if self._fatal is None:
                self._fatal = error
            self._cond.notify_all()
