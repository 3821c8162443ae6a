"""Options of the Bigtable sink: how the per-table batchers batch, overlap and retry, and how
tables are created when the sink may create them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError

#: Bigtable rejects a MutateRows request with more mutations (cells) than this.
MAX_MUTATIONS_PER_REQUEST = 100_000

_MIB = 1024 * 1024
_FAMILY = re.compile(r"[-_.a-zA-Z0-9]{1,64}")


def _seconds(value: timedelta | float | int | None, what: str, *, allow_none: bool) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise ConfigurationError(f"{what} must be set")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(
            f"{what} must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    if seconds <= 0:
        raise ConfigurationError(f"{what} must be positive, got {value!r}")
    return seconds


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class BigtableWriterOptions:
    """How each subtask batches and sends the mutations of its active tables.

    Each active table has one batcher. A batcher fills a MutateRows request with entries and
    sends it in the background as soon as one of the ``batch_max_*`` limits is reached, so
    encoding the next batch overlaps the previous RPC; requests of all tables of a subtask share
    ``max_concurrent_requests`` threads. Everything still buffered is sent and awaited before
    every checkpoint barrier, at the end of input, and at the latest every ``flush_interval``
    or ``flush_max_records`` records (so an unbounded job without checkpoints still writes).

    Build with :meth:`builder`::

        BigtableWriterOptions.builder().destination_idle_timeout(timedelta(minutes=15)).build()

    Attributes:
        batch_max_entries: Entries (rows) per MutateRows request.
        batch_max_bytes: Encoded bytes per request (an entry larger than this goes alone).
        batch_max_mutations: Mutations (cells) per request; Bigtable's limit, 100,000, is the
            maximum. A batch over it is split.
        max_in_flight_entries: Entries of one table sent but not yet acknowledged; beyond it,
            writing to that table blocks (backpressure) until a request completes.
        max_in_flight_bytes: The same bound in encoded bytes.
        max_concurrent_requests: Threads per subtask sending requests, shared by all tables.
        flush_interval: Longest time a record waits before a full flush.
        flush_max_records: Records per subtask between full flushes. Every full flush sends
            each dirty table's partial request, so with many tables a larger value means
            fewer, larger requests (the time bound above still caps the latency).
        destination_idle_timeout: A table's batcher unused this long is released after a
            successful flush and rebuilt when the table is used again; None keeps it.
        retry_deadline: Total time spent retrying transient failures of one request (whole
            RPC or single entries) before the job fails.
        rpc_timeout: Timeout of one MutateRows attempt.
        app_profile_id: The Bigtable app profile for the data requests, or None (default).
        per_table_metrics: Register a record counter per table in the sink's metric group.
    """

    batch_max_entries: int = 1_000
    batch_max_bytes: int = 20 * _MIB
    batch_max_mutations: int = MAX_MUTATIONS_PER_REQUEST
    max_in_flight_entries: int = 50_000
    max_in_flight_bytes: int = 64 * _MIB
    max_concurrent_requests: int = 8
    flush_interval: timedelta = timedelta(seconds=1)
    flush_max_records: int = 50_000
    destination_idle_timeout: timedelta | None = timedelta(minutes=15)
    retry_deadline: timedelta = timedelta(minutes=2)
    rpc_timeout: timedelta = timedelta(seconds=60)
    app_profile_id: str | None = None
    per_table_metrics: bool = False

    def __post_init__(self) -> None:
        for name in (
            "batch_max_entries",
            "batch_max_bytes",
            "batch_max_mutations",
            "max_in_flight_entries",
            "max_in_flight_bytes",
            "max_concurrent_requests",
            "flush_max_records",
        ):
            _positive_int(getattr(self, name), f"BigtableWriterOptions.{name}")
        if self.batch_max_mutations > MAX_MUTATIONS_PER_REQUEST:
            raise ConfigurationError(
                f"BigtableWriterOptions.batch_max_mutations={self.batch_max_mutations} exceeds "
                f"Bigtable's limit of {MAX_MUTATIONS_PER_REQUEST} mutations per MutateRows request"
            )
        for name in ("flush_interval", "retry_deadline", "rpc_timeout"):
            object.__setattr__(self, name, _as_timedelta(getattr(self, name), name, False))
        object.__setattr__(
            self,
            "destination_idle_timeout",
            _as_timedelta(self.destination_idle_timeout, "destination_idle_timeout", True),
        )
        if self.flush_interval < timedelta(milliseconds=1):
            raise ConfigurationError("BigtableWriterOptions.flush_interval must be at least 1 ms")
        if self.app_profile_id is not None and not isinstance(self.app_profile_id, str):
            raise ConfigurationError("BigtableWriterOptions.app_profile_id must be a string")

    @staticmethod
    def builder() -> BigtableWriterOptionsBuilder:
        return BigtableWriterOptionsBuilder()

    @staticmethod
    def defaults() -> BigtableWriterOptions:
        return BigtableWriterOptions()


def _as_timedelta(value: Any, name: str, allow_none: bool) -> timedelta | None:
    seconds = _seconds(value, f"BigtableWriterOptions.{name}", allow_none=allow_none)
    return None if seconds is None else timedelta(seconds=seconds)


class BigtableWriterOptionsBuilder:
    """Fluent builder of :class:`BigtableWriterOptions`; each method sets the field of its name.

    Durations take a ``timedelta`` or a number of seconds. Values are validated at
    :meth:`build`.
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> BigtableWriterOptionsBuilder:
        self._values[name] = value
        return self

    def batch_max_entries(self, entries: int) -> BigtableWriterOptionsBuilder:
        return self._set("batch_max_entries", entries)

    def batch_max_bytes(self, size: int) -> BigtableWriterOptionsBuilder:
        return self._set("batch_max_bytes", size)

    def batch_max_mutations(self, mutations: int) -> BigtableWriterOptionsBuilder:
        return self._set("batch_max_mutations", mutations)

    def max_in_flight_entries(self, entries: int) -> BigtableWriterOptionsBuilder:
        return self._set("max_in_flight_entries", entries)

    def max_in_flight_bytes(self, size: int) -> BigtableWriterOptionsBuilder:
        return self._set("max_in_flight_bytes", size)

    def max_concurrent_requests(self, requests: int) -> BigtableWriterOptionsBuilder:
        return self._set("max_concurrent_requests", requests)

    def flush_interval(self, interval: timedelta | float) -> BigtableWriterOptionsBuilder:
        return self._set("flush_interval", interval)

    def flush_max_records(self, records: int) -> BigtableWriterOptionsBuilder:
        return self._set("flush_max_records", records)

    def destination_idle_timeout(
        self, timeout: timedelta | float | None
    ) -> BigtableWriterOptionsBuilder:
        return self._set("destination_idle_timeout", timeout)

    def retry_deadline(self, deadline: timedelta | float) -> BigtableWriterOptionsBuilder:
        return self._set("retry_deadline", deadline)

    def rpc_timeout(self, timeout: timedelta | float) -> BigtableWriterOptionsBuilder:
        return self._set("rpc_timeout", timeout)

    def app_profile_id(self, profile: str | None) -> BigtableWriterOptionsBuilder:
        return self._set("app_profile_id", profile)

    def per_table_metrics(self, enabled: bool = True) -> BigtableWriterOptionsBuilder:
        return self._set("per_table_metrics", bool(enabled))

    def build(self) -> BigtableWriterOptions:
        return replace(BigtableWriterOptions(), **self._values)


@dataclass(frozen=True)
class TableCreateOptions:
    """Lets the sink create the tables its resolver names (opt-in).

    One declaration applies to every table the resolver can name: a missing table is created,
    when its batcher is first built, with exactly these column families. Without these options
    a missing table fails the job with an error naming it.

    Attributes:
        column_families: Family name to garbage-collection rule: an ``int`` keeps that many
            versions per cell, a ``timedelta`` keeps cells younger than it, ``None`` keeps
            everything. At least one family.
        max_tables: How many tables one sink subtask may create (in one run of the job). A
            guard against a resolver that names far more tables than intended (a table per
            record instead of per day): one more fails the job with an error naming the
            resolver and the count. The job as a whole creates at most ``max_tables`` times
            its parallelism.

    Example:
        ``TableCreateOptions(column_families={"cf": 1, "history": timedelta(days=30)})``
    """

    column_families: Mapping[str, int | timedelta | None] = field(default_factory=dict)
    max_tables: int = 100

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
        _positive_int(self.max_tables, "TableCreateOptions.max_tables")

    def __hash__(self) -> int:
        return hash(
            (tuple(sorted(self.column_families.items(), key=lambda kv: kv[0])), self.max_tables)
        )
