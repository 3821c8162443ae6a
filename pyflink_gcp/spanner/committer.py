"""Committing: one commit with its retries, what a failed commit means, and the commit thread.

A commit that fails:

- transiently (ABORTED, UNAVAILABLE, ...): retried with backoff until the retry deadline, then
  the job fails. The emulator runs one transaction at a time and aborts the others, so under
  parallelism this path is exercised constantly there; an aborted commit first waits about as
  long as a commit takes, since an earlier retry would only be aborted again.
- because its session expired: a new session is created and the commit retried.
- for a record-shaped reason (:func:`is_record_fault`): the writer splits the batch to find the
  record (see :mod:`pyflink_gcp.spanner.writer`).
- for any other reason (permissions, a dropped table): the job fails with the error.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from google.api_core import exceptions as api_exceptions

from pyflink_gcp.core import status
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy, status_name
from pyflink_gcp.spanner.client import wrap_commit
from pyflink_gcp.spanner.options import SpannerWriterOptions
from pyflink_gcp.spanner.session import Session

_LOG = logging.getLogger("pyflink_gcp.spanner")

#: Statuses of a commit rejected for its content: besides the shared ones, a row that already
#: exists (an insert) or is missing (an update).
RECORD_FAULT_CODES: frozenset[str] = status.RECORD_FAULT_CODES | {"ALREADY_EXISTS", "NOT_FOUND"}

#: Retries of a commit whose session was deleted under it.
SESSION_RENEWALS = 3
#: Bounds of the first wait after ABORTED (see :meth:`Committer.aborted_backoffs`).
ABORTED_MIN_BACKOFF_S = 0.01
ABORTED_MAX_BACKOFF_S = 0.25


def is_schema_change(error: BaseException) -> bool:
    """Whether a commit failed because a table or column it names was dropped.

    The writer checks every name against the schema before it commits, so this is never the
    record's fault: the schema changed under the running job.
    """
    if status_name(error) != "NOT_FOUND":
        return False
    message = str(getattr(error, "message", error)).lower()
    return message.startswith("table not found") or message.startswith("column not found")


def is_record_fault(error: BaseException) -> bool:
    """Whether a commit was rejected for the content of its mutations (split it to find them)."""
    return status.is_record_fault(error, RECORD_FAULT_CODES) and not is_schema_change(error)


def rejection_text(error: BaseException) -> str:
    """``STATUS: message`` of a rejected commit, for the failure handler's reason."""
    return f"{status_name(error)}: {getattr(error, 'message', error)}"


class Committer:
    """Commits raw ``CommitRequest`` s in the session, retrying transient errors.

    Runs on the writer's committer thread; the retry policies and the moving average of a
    commit's duration are its own.
    """

    def __init__(
        self,
        session: Session,
        options: SpannerWriterOptions,
        retry: RetryPolicy,
        window: QuotaWindow | None = None,
    ) -> None:
        self.session = session
        self.retry = retry
        #: The writer's window of commits in flight: told of quota errors and successes.
        self.window = window
        # An aborted commit is retried sooner: another transaction won a race (on the emulator,
        # simply ran at the same time), and its commit is not going to take seconds.
        self.retry_aborted = RetryPolicy(
            initial_backoff_s=ABORTED_MIN_BACKOFF_S,
            max_backoff_s=ABORTED_MAX_BACKOFF_S,
            deadline_s=retry.deadline_s,
            # Aborts are Spanner's concurrency control at work, not a fault: warn only when a
            # commit keeps being aborted.
            quiet_attempts=3,
        )
        # One attempt never outlasts the retry deadline (a silent endpoint fails an attempt
        # only at its timeout).
        self._timeout = retry.attempt_timeout(options.commit_timeout.total_seconds())
        #: How long a commit's outcome can take at most, retries included (the writers' waits).
        self.stall_s = retry.stall_bound(self._timeout)
        #: Spanner's ``max_commit_delay`` commit option, sent with every commit when set.
        self._commit_delay = options.max_commit_delay
        #: The bound on the total wait between one commit's retries (quota waits aside).
        backoff = options.max_cumulative_backoff
        self.max_backoff_s = None if backoff is None else backoff.total_seconds()
        #: Moving average of a successful commit's duration: how long the transaction that
        #: aborted ours is likely to hold on (see :meth:`aborted_backoffs`).
        self.commit_seconds = 0.0

    def commit(self, request: Any, what: str) -> None:
        """Commit ``request`` (a raw CommitRequest; its session is set here).

        Raises:
            WriteError: Still failing transiently at the retry deadline.
            Exception: The client's error for anything not transient.
        """
        session = self.session
        api = session.api
        if self._commit_delay is not None:
            request.max_commit_delay.FromTimedelta(self._commit_delay)
        for renewal in range(SESSION_RENEWALS + 1):
            name = session.name()
            request.session = name

            def attempt() -> Any:
                return api.commit(
                    request=wrap_commit(request),
                    retry=None,
                    timeout=self._timeout,
                    metadata=session.metadata,
                )

            try:
                self._retrying(attempt, what)
                return
            except api_exceptions.NotFound as exc:
                if "session not found" not in str(exc.message).lower():
                    raise
                if renewal == SESSION_RENEWALS:
                    raise
                _LOG.info("%s: session %s expired; creating a new one", what, name)
                session.renew(name)

    def _retrying(self, attempt: Callable[[], Any], what: str) -> Any:
        """Call ``attempt`` until it succeeds; ABORTED and other transient errors back off
        separately (see :meth:`aborted_backoffs`), each up to the retry deadline, and all
        their waits together up to ``max_cumulative_backoff``."""
        aborted: BackoffSequence | None = None
        other: BackoffSequence | None = None
        waited = 0.0
        while True:
            start = time.monotonic()
            try:
                result = attempt()
            except Exception as exc:
                if status_name(exc) == "ABORTED":
                    aborted = aborted or self.aborted_backoffs()
                    waited = self._wait(aborted, exc, what, waited)
                elif self.retry.is_transient(exc):
                    # Quota errors (RESOURCE_EXHAUSTED) wait on the policy's quota schedule.
                    other = other or self.retry.backoffs(self.window)
                    waited = self._wait(other, exc, what, waited)
                else:
                    raise
            else:
                if self.window is not None:
                    self.window.on_success()
                self.commit_seconds += 0.25 * (time.monotonic() - start - self.commit_seconds)
                return result

    def _wait(self, backoffs: BackoffSequence, exc: Exception, what: str, waited: float) -> float:
        """Sleep before the next attempt; returns the waits so far (quota waits, bounded by the
        policy's quota deadline, do not count).

        Raises:
            WriteError: The wait would pass the retry deadline or ``max_cumulative_backoff``.
        """
        sleep = backoffs.next_wait(exc, what)
        limit = self.max_backoff_s
        if limit is not None and not self.retry.is_quota(exc):
            if waited + sleep > limit:
                raise WriteError(
                    f"{what}: still failing after {backoffs.attempts} attempts, having waited "
                    f"{waited:.1f}s between them (max_cumulative_backoff {limit:g}s): "
                    f"{status_name(exc)}: {exc}"
                ) from exc
            waited += sleep
        time.sleep(sleep)
        return waited

    def aborted_backoffs(self) -> BackoffSequence:
        """The waits of an aborted commit, starting near the length of a typical commit.

        The emulator runs one transaction at a time and aborts any other at its first write,
        after it has decoded the whole request: a retry that comes back before the running
        commit is done costs the emulator that work again for nothing. So the first wait is
        drawn up to the duration of this writer's recent commits (the other subtasks send
        commits of the same kind), within the bounds of ``retry_aborted``. On Spanner a blind
        write is rarely aborted, and then it waits about one commit.
        """
        policy = self.retry_aborted
        first = min(max(self.commit_seconds, policy.initial_backoff_s), policy.max_backoff_s)
        if first == policy.initial_backoff_s:
            return policy.backoffs()
        return dataclasses.replace(policy, initial_backoff_s=first).backoffs()


class OrderedExecutor:
    """One daemon thread running submitted calls in submission order.

    A daemon thread (not a ThreadPoolExecutor) so that a task torn down after a failure never
    waits for an in-flight commit: its records are replayed from the checkpoint anyway.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` after everything submitted before it; its result or error in the future."""
        future: Future[Any] = Future()
        self._queue.put((future, fn))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Stop the thread after the calls already submitted."""
        self._queue.put(None)
