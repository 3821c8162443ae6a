"""A table written by an assumed layout: when its refusals send the sender to the table.

A new table of a dataset whose tables exist may get a layout built from the serializer's
declared schema, without a call (:attr:`~pyflink_gcp.bigquery.tables.TableLayout.assumed`,
:mod:`pyflink_gcp.bigquery.stream_lookup`). That layout is the serializer's word for the
table, and the table may say otherwise: a column the declaration lacks, a column the table
lacks, another type, no table at all. So nothing is refused on that word alone. The requests it
encoded say so (``Batch.layout``, ``Batch.guessed``), and the first of these refusals makes the
sender ask for the table's own layout, once, and encode the same rows again by it:

- a row the assumed layout cannot encode (an unknown key, a wrong type), before any request;
- an answer with per-row errors, or an error status other than a transient one;
- a lost connection whose status is not transient, or NOT_FOUND (a table missing: the lookup
  creates it under ``CREATE_IF_NEEDED``, or names it).

None of these counts against the retry deadline or reaches the failure handler before the
check. After it the table's layout stands, and a refusal means what it means for any table
(:mod:`pyflink_gcp.bigquery.responses`). Requests still in flight by the assumed layout are
encoded again when they come back refused; those it encoded and nobody refused stand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import grpc

from pyflink_gcp.bigquery.batch import Batch
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.status import StatusError
from pyflink_gcp.core.waits import LazyCondition

_LOG = logging.getLogger("pyflink_gcp.bigquery")


class LayoutChecks:
    """Sends a sender whose assumed layout was refused to the table's own (see the module
    docstring); mixed into :class:`~pyflink_gcp.bigquery.sender.TableSender`, whose state it
    changes in its steps (one thread at a time)."""

    _check: Callable[[], Future[TableLayout]] | None
    _cond: LazyCondition
    _layout: TableLayout | None
    _layout_source: TableLayout | Future[TableLayout]
    _retry: RetryPolicy
    _what: str

    def _step(self) -> None:
        """Run the sender's steps (the sender's)."""
        raise NotImplementedError

    def _guess_refused(self, answer: Any, batches: list[Batch]) -> bool:
        """Whether ``answer`` refuses requests among ``batches`` encoded by an assumed layout;
        if so, the table's own layout is asked for, and the caller queues them again (they are
        encoded again before they are sent). A success or a transient error (NOT_FOUND aside: a
        table missing) says nothing of the layout."""
        guesses = [batch.layout for batch in batches if batch.guessed]
        if not guesses or (self._check is None and self._layout is guesses[0]):
            return False  # no guess, or one nothing can check (no ``check`` was given)
        if isinstance(answer, Exception):
            error: Exception = answer
        elif answer.row_errors:
            error = StatusError(grpc.StatusCode.INVALID_ARGUMENT, "rows refused")
        elif answer.HasField("error") and answer.error.code:
            error = StatusError.of(answer.error.code, answer.error.message)
        else:
            return False
        if status_name(error) != "NOT_FOUND" and self._retry.is_transient(error):
            return False
        self._check_layout(error)
        return True

    def _check_layout(self, reason: object) -> None:
        """Ask for the table's own layout instead of the assumed one (once; in a step, so that
        no other step reads the layout meanwhile: the steps wait for it as for a first lookup,
        and its end runs them)."""
        check, self._check = self._check, None
        if check is None:
            return
        _LOG.debug("%s: asking the table for its layout (%s)", self._what, reason)
        source = check()
        with self._cond:
            self._layout = None
            self._layout_source = source
        source.add_done_callback(lambda _: self._step())
