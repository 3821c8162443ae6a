"""Table existence and creation: checked once per table and subtask, when a batcher is built.

A missing table must fail the job with an error naming it, and under
``CreateDisposition.CREATE_IF_NEEDED`` be created with the declared column families, at most
``max_created_destinations`` per subtask and ``max_created_destinations_per`` window
(:class:`~pyflink_gcp.core.creation.CreationBudget`). Checking when a batcher is first built (instead of
reacting to a NOT_FOUND of MutateRows) keeps the hot path free of admin calls and gives every
error a table name.

Without creation the check does not block the processing thread (:meth:`BigtableTables.start`):
its first GetTable is a gRPC future (:class:`~pyflink_gcp.core.checked.PendingCheck`) that no
thread waits on; at thousands of tables a blocking check per new table would cost the
processing thread a round trip each. The table's first MutateRows go out alongside it, and
report their outcome on the event loop once it has answered: a table's first flush then waits
one round trip, not the check's and then the write's, and a request to a missing table writes
nothing (NOT_FOUND) while the check's error, naming the table, is the one raised. Only if that
first attempt fails does the full check (retries, the error naming the table) run, on a helper
thread. Under creation the check and the creation stay on the processing thread, before the
table's first request, so the creation bound is met in record order and no request reaches a
table before it is created.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pyflink_gcp.bigtable.destinations import TableDestination
from pyflink_gcp.bigtable.options import TableCreateOptions
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.core.checked import (
    CHECKED_NAMES_LIMIT,
    CHECKS_IN_FLIGHT,
    CheckCalls,
    CheckedNames,
    PendingCheck,
)
from pyflink_gcp.core.creation import DEFAULT_WINDOW, CreationBudget
from pyflink_gcp.core.errors import (
    DestinationNotFoundError,
    SinkError,
    WriteError,
)
from pyflink_gcp.core.retry import RetryPolicy, status_name

_LOG = logging.getLogger("pyflink_gcp.bigtable")

#: The last tables created that a subtask remembers, for the creation bound's error.
_RECENT_CREATED = 5


class BigtableTables:
    """The tables one sink subtask knows to exist; checks (and may create) the others.

    Used from the processing thread, but for the full checks of :meth:`start`'s pending
    checks, which run on helper threads of the event loop (without creation: no state but the
    known names, which are thread-safe).

    Args:
        sink_name: For errors and logs.
        admin: Returns the table admin client (opened lazily by the caller).
        policy: Retries transient admin failures.
        timeout_s: Timeout of one admin call.
        create_options: The column families of created tables; None: never create.
        max_created: How many tables this subtask may create at once, and then per
            ``max_created_per``.
        max_created_per: The window of the creation budget.
        resolver_name: Named by the creation-bound error.
        subtask_index: Named by the creation-bound error.
        stats: Counts ``tables_created``.
        endpoint: The admin endpoint (``host:port``), named by errors.
        get_table_future: Starts one GetTable attempt of a table name without waiting
            (:meth:`~pyflink_gcp.bigtable.client.BigtableClient.get_table_future`); None:
            every check blocks.
    """

    def __init__(
        self,
        *,
        sink_name: str,
        admin: Callable[[], Any],
        policy: RetryPolicy,
        timeout_s: float,
        create_options: TableCreateOptions | None,
        max_created: int,
        max_created_per: timedelta = DEFAULT_WINDOW,
        resolver_name: str = "",
        subtask_index: int = 0,
        stats: BigtableWriterStats | None = None,
        endpoint: str = "",
        get_table_future: Callable[[str, float], Any] | None = None,
    ) -> None:
        self._sink = sink_name
        self._at = f" at {endpoint}" if endpoint else ""
        self._admin = admin
        self._policy = policy
        self._timeout_s = timeout_s
        self._create_options = create_options
        self.budget = CreationBudget(max_created, max_created_per)
        self._resolver_name = resolver_name
        self._subtask = subtask_index
        self._stats = stats if stats is not None else BigtableWriterStats()
        self._get_table_future = get_table_future
        #: The first GetTable attempts, a bounded number in flight (thousands of new tables
        #: at once would hold thousands of calls).
        self.checks = CheckCalls(CHECKS_IN_FLIGHT, f"sink '{sink_name}'")
        # Tables found to exist, so re-created batchers do not ask again; bounded, so a job
        # naming ever new tables does not grow it without end.
        self._known = CheckedNames(CHECKED_NAMES_LIMIT)
        #: The last tables this subtask created (a few: a long-lived job creates without end).
        self.created: deque[str] = deque(maxlen=_RECENT_CREATED)

    def start(self, destination: TableDestination) -> PendingCheck | None:
        """Check ``destination`` without blocking where the sink creates no tables.

        Returns:
            None when the table is known to exist (or was checked, and created if needed,
            here, under creation); else its pending check, which the table's first requests
            go out alongside and whose answer they report after (its
            :meth:`PendingCheck.wait` raises what :meth:`ensure` raises).
        """
        name = destination._name
        if name in self._known:
            return None
        if self._create_options is not None or self._get_table_future is None:
            self.ensure(destination)
            return None
        call = self.checks.start(self._get_table_future, str(destination), self._timeout_s)
        return PendingCheck(call, lambda: self.ensure(destination), lambda: self._known.add(name))

    def close(self) -> None:
        """Start no more checks (queued ones end with an error, so nothing waits for them)."""
        self.checks.close()

    def ensure(self, destination: TableDestination) -> None:
        """Return once ``destination`` exists (creating it if allowed).

        Raises:
            DestinationNotFoundError: It does not exist and may not be created (or its instance
                does not exist).
            CreationLimitExceededError: Creating it would exceed the creation bound.
            WriteError: An admin call failed otherwise.
        """
        name = destination._name
        if name in self._known:
            return
        if not self._exists(destination):
            self.create(destination)
        self._known.add(name)

    def _exists(self, destination: TableDestination) -> bool:
        from google.cloud.bigtable_admin_v2.types import table as admin_table

        name = str(destination)
        what = f"sink '{self._sink}': table '{name}'{self._at}"
        admin = self._admin()
        try:
            self._policy.call(
                lambda: admin.get_table(
                    request={"name": name, "view": admin_table.Table.View.NAME_ONLY},
                    retry=None,
                    timeout=self._timeout_s,
                ),
                f"{what}: checking that it exists",
            )
            return True
        except SinkError:
            raise
        except Exception as exc:
            status = status_name(exc)
            if status == "PERMISSION_DENIED" and self._create_options is None:
                # Writing needs no admin permission; a missing table still fails the first
                # MutateRows with NOT_FOUND, naming the table.
                _LOG.warning(
                    "%s: cannot check that the table exists (%s); writing without the check",
                    what,
                    exc,
                )
                return True
            if status != "NOT_FOUND":
                raise WriteError(
                    f"{what}: checking that it exists failed with {status}: {exc}"
                ) from exc
        if self._create_options is None:
            raise DestinationNotFoundError(
                f"{what} does not exist, and the sink may not create tables. Create it, or "
                "enable creation with set_create_disposition(CreateDisposition."
                "CREATE_IF_NEEDED) and set_table_create_options(TableCreateOptions("
                "column_families={...}))."
            )
        return False

    def create(self, destination: TableDestination) -> None:
        """Create ``destination`` with the declared column families; a table that appeared
        meanwhile (another subtask created it first) is not an error.

        Raises:
            CreationLimitExceededError: The subtask's creation budget is spent.
        """
        options = self._create_options
        assert options is not None
        name = str(destination)
        budget = self.budget
        if not budget.take():
            shown = ", ".join(t.rsplit("/", 1)[1] for t in self.created)
            raise budget.exceeded(
                sink=self._sink,
                what=f"creating table '{name}' (subtask {self._subtask})",
                noun="tables",
                resolver=self._resolver_name or "(unknown)",
                owner="BigtableWriterOptions",
                detail=f"the last: {shown}" if shown else "",
            )
        try:
            self._create(destination, options)
        except BaseException:
            budget.give_back()
            raise

    def _create(self, destination: TableDestination, options: TableCreateOptions) -> None:
        from google.cloud.bigtable_admin_v2.types import table as admin_table

        name = str(destination)
        families = {
            family: admin_table.ColumnFamily(gc_rule=gc_rule(rule))
            for family, rule in options.column_families.items()
        }
        admin = self._admin()
        what = f"sink '{self._sink}': table '{name}'{self._at}"
        try:
            self._policy.call(
                lambda: admin.create_table(
                    request={
                        "parent": destination.instance_name,
                        "table_id": destination.table,
                        "table": admin_table.Table(column_families=families),
                    },
                    retry=None,
                    timeout=self._timeout_s,
                ),
                f"{what}: creating it",
            )
        except SinkError:
            raise
        except Exception as exc:
            status = status_name(exc)
            if status == "ALREADY_EXISTS":
                # Another subtask (or a retried attempt of this call) created it first: not
                # counted against this subtask.
                self.budget.give_back()
                return
            if status == "NOT_FOUND":
                raise DestinationNotFoundError(
                    f"{what}: cannot create it, instance '{destination.instance_name}' not "
                    f"found: {exc}"
                ) from exc
            raise WriteError(f"{what}: creating it failed with {status}: {exc}") from exc
        self.created.append(name)
        self._stats.add(tables_created=1)
        _LOG.info(
            "%s: created table %s with column families %s",
            self._sink,
            name,
            sorted(options.column_families),
        )


def gc_rule(rule: int | timedelta | None) -> Any:
    """The admin API's garbage-collection rule of a :class:`TableCreateOptions` family value:
    keep ``rule`` versions (int), cells younger than ``rule`` (timedelta), or everything."""
    from google.cloud.bigtable_admin_v2.types import table as admin_table

    if rule is None:
        return admin_table.GcRule()
    if isinstance(rule, int):
        return admin_table.GcRule(max_num_versions=rule)
    return admin_table.GcRule(max_age=rule)
