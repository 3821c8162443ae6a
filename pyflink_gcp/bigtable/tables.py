"""Table creation, and why a sink that creates no tables asks nothing before it writes.

A missing table must fail the job with an error naming it, and under
``CreateDisposition.CREATE_IF_NEEDED`` be created with the declared column families, at most
``max_created_destinations`` per subtask and ``max_created_destinations_per`` window
(:class:`~pyflink_gcp.core.creation.CreationBudget`).

Under creation the check (``GetTable``) and the creation run on the processing thread when a
table's batcher is first built, before its first request, so the creation bound is met in
record order and no request reaches a table before it is created.

Without creation nothing is asked: a table (or instance) that does not exist refuses the
table's first MutateRows with NOT_FOUND and writes nothing, and that answer fails the job with a
:class:`~pyflink_gcp.core.errors.DestinationNotFoundError` naming the table and what to do
(:class:`~pyflink_gcp.bigtable.mutate_rows.MutateRowsCall`). A check first would say the same
one call earlier, at a price: a GetTable per table and subtask cost more client CPU than the
table's MutateRows (one subtask's writer against the null backend, 10,000 tables of 5 records:
151-167 µs per record with the check, 65-68 without), and an admin permission writing does not
need.
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
from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames
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
    """The tables one sink subtask knows to exist; under creation, checks and creates the
    others (see the module docstring). Used from the processing thread.

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
        # Tables found to exist, so re-created batchers do not ask again; bounded, so a job
        # naming ever new tables does not grow it without end.
        self._known = CheckedNames(CHECKED_NAMES_LIMIT)
        #: The last tables this subtask created (a few: a long-lived job creates without end).
        self.created: deque[str] = deque(maxlen=_RECENT_CREATED)

    def start(self, destination: TableDestination) -> None:
        """Prepare ``destination`` for its first request: under creation, return once it
        exists (created if needed); without, nothing (its first MutateRows answers)."""
        if self._create_options is not None:
            self.ensure(destination)

    def ensure(self, destination: TableDestination) -> None:
        """Return once ``destination`` exists, created if it did not (the sink creates tables:
        without creation nothing calls this, see the module docstring).

        Raises:
            DestinationNotFoundError: Its instance does not exist.
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
            if status != "NOT_FOUND":
                raise WriteError(
                    f"{what}: checking that it exists failed with {status}: {exc}"
                ) from exc
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
