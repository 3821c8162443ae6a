"""Options of the Bigtable sink: how the per-table batchers batch, overlap and retry, and the
column families of the tables the sink creates."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Self

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import (
    CreatingOptionsBuilder,
    CreatingWriterOptions,
    check_duration,
    check_instance,
    check_int,
)

#: Bigtable rejects a MutateRows request with more mutations (cells) than this.
MAX_MUTATIONS_PER_REQUEST = 100_000

_MIB = 1024 * 1024
_FAMILY = re.compile(r"[-_.a-zA-Z0-9]{1,64}")


@dataclass(frozen=True, kw_only=True)
class BigtableWriterOptions(CreatingWriterOptions):
    """How each subtask batches and sends the mutations of its active tables.

    Each active table has one batcher. A batcher fills a MutateRows request with entries and
    starts it on the subtask's event loop as soon as one of the ``batch_max_*`` limits is reached,
    so encoding the next batch overlaps the previous RPC. Everything still buffered is sent
    before every checkpoint barrier, at the end of input, and at the latest every
    ``max_buffer_time`` or ``max_buffered_records`` records (so an unbounded job without
    checkpoints still writes).

    Build with :meth:`builder`::

        BigtableWriterOptions.builder().idle_timeout(timedelta(minutes=15)).build()

    The shared settings are those of
    :class:`~pyflink_gcp.core.options.CreatingWriterOptions`; here:

    Attributes:
        max_buffered_records: Records per subtask between two sends of every dirty table's
            partial request (default 50,000): with many tables a larger value means fewer,
            larger requests, and ``max_buffer_time`` still caps the latency.
        max_in_flight_requests: MutateRows calls in flight per subtask, over all its tables
            (default 50; fewer while Bigtable answers quota errors). A call in flight costs a
            coroutine on the event loop, not a thread, and a checkpoint at thousands of tables
            sends a call per table: at 8, a flush of 10,000 tables at 20 ms took 27 s. The
            subtask's calls share one connection, which carries at most 100 concurrent
            streams; Bigtable's documentation puts a connection's best load at 10 to 50.
        retry_deadline: Total time spent retrying transient failures of one request (of the
            whole RPC or of single entries) before the job fails.
        max_created_destinations: Tables one subtask may create under
            ``CreateDisposition.CREATE_IF_NEEDED`` at once, and then per
            ``max_created_destinations_per`` (the shared creation budget).
        max_created_destinations_per: The window of the creation budget (default 1 hour).
        batch_max_entries: Entries (rows) per MutateRows request.
        batch_max_bytes: Encoded bytes per request (an entry larger than this goes alone).
        batch_max_mutations: Mutations (cells) per request; Bigtable's limit, 100,000, is the
            maximum. A batch over it is split.
        max_in_flight_entries: Entries of one table sent but not yet acknowledged; beyond it,
            writing to that table blocks (backpressure) until a request completes.
        max_in_flight_bytes: The same bound in encoded bytes.
        rpc_timeout: Timeout of one MutateRows attempt (and of one admin call).
        app_profile_id: The Bigtable app profile for the data requests, or None (default).
    """

    max_buffered_records: int = 50_000
    max_in_flight_requests: int = 50
    batch_max_entries: int = 1_000
    batch_max_bytes: int = 20 * _MIB
    batch_max_mutations: int = MAX_MUTATIONS_PER_REQUEST
    max_in_flight_entries: int = 50_000
    max_in_flight_bytes: int = 64 * _MIB
    rpc_timeout: timedelta = timedelta(seconds=60)
    app_profile_id: str | None = None

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        for name in (
            "batch_max_entries",
            "batch_max_bytes",
            "max_in_flight_entries",
            "max_in_flight_bytes",
        ):
            check_int(owner, name, getattr(self, name))
        check_int(
            owner,
            "batch_max_mutations",
            self.batch_max_mutations,
            maximum=MAX_MUTATIONS_PER_REQUEST,
        )
        check_duration(owner, "rpc_timeout", self.rpc_timeout)
        if self.app_profile_id is not None:
            check_instance(owner, "app_profile_id", self.app_profile_id, str, "a profile id")

    @property
    def rpc_timeout_s(self) -> float:
        """``rpc_timeout`` in seconds."""
        return self.rpc_timeout.total_seconds()

    @staticmethod
    def builder() -> BigtableWriterOptionsBuilder:
        """A builder of :class:`BigtableWriterOptions`; unset settings keep their defaults."""
        return BigtableWriterOptionsBuilder()


class BigtableWriterOptionsBuilder(CreatingOptionsBuilder[BigtableWriterOptions]):
    """Builds :class:`BigtableWriterOptions`; each method sets the option of its name, and
    :meth:`build` validates them all."""

    options_type = BigtableWriterOptions

    def batch_max_entries(self, entries: int) -> Self:
        """Entries (rows) per MutateRows request (default 1,000)."""
        return self._set("batch_max_entries", entries)

    def batch_max_bytes(self, size: int) -> Self:
        """Encoded bytes per MutateRows request (default 20 MiB)."""
        return self._set("batch_max_bytes", size)

    def batch_max_mutations(self, mutations: int) -> Self:
        """Mutations (cells) per MutateRows request, at most Bigtable's 100,000 (the default)."""
        return self._set("batch_max_mutations", mutations)

    def max_in_flight_entries(self, entries: int) -> Self:
        """Unacknowledged entries of one table before writing blocks (default 50,000)."""
        return self._set("max_in_flight_entries", entries)

    def max_in_flight_bytes(self, size: int) -> Self:
        """Unacknowledged bytes of one table before writing blocks (default 64 MiB)."""
        return self._set("max_in_flight_bytes", size)

    def rpc_timeout(self, timeout: timedelta) -> Self:
        """Timeout of one MutateRows attempt or admin call (default 60 s)."""
        return self._set("rpc_timeout", timeout)

    def app_profile_id(self, profile: str | None) -> Self:
        """The Bigtable app profile of the data requests (default: the instance's default)."""
        return self._set("app_profile_id", profile)


@dataclass(frozen=True)
class TableCreateOptions:
    """The column families of the tables the sink creates under
    ``CreateDisposition.CREATE_IF_NEEDED``.

    One declaration applies to every table the resolver can name: a missing table is created,
    when its batcher is first built, with exactly these column families. How many tables a
    subtask may create is ``BigtableWriterOptions.max_created_destinations``.

    Attributes:
        column_families: Family name to garbage-collection rule: an ``int`` keeps that many
            versions per cell, a ``timedelta`` keeps cells younger than it, ``None`` keeps
            everything. At least one family.

    Example:
        ``TableCreateOptions(column_families={"cf": 1, "history": timedelta(days=30)})``
    """

    column_families: Mapping[str, int | timedelta | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.column_families, Mapping) or not self.column_families:
            raise ConfigurationError(
                "TableCreateOptions needs at least one column family, e.g. "
                "TableCreateOptions(column_families={'cf': 1})"
            )
        families: dict[str, int | timedelta | None] = {}
        for name, rule in self.column_families.items():
            if not isinstance(name, str) or not _FAMILY.fullmatch(name):
                raise ConfigurationError(
                    f"TableCreateOptions: invalid column family name {name!r} "
                    "(1-64 characters of [-_.a-zA-Z0-9])"
                )
            if isinstance(rule, bool) or not (
                rule is None
                or (isinstance(rule, int) and rule >= 1)
                or (isinstance(rule, timedelta) and rule > timedelta(0))
            ):
                raise ConfigurationError(
                    f"TableCreateOptions: column family {name!r} needs a max number of "
                    f"versions (int >= 1), a max age (positive timedelta) or None, got {rule!r}"
                )
            families[name] = rule
        object.__setattr__(self, "column_families", families)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.column_families.items(), key=lambda kv: kv[0])))
