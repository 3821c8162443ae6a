"""Options of the Spanner sink: how each subtask batches mutations into commits and retries them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError

#: Spanner rejects a commit counting more mutations than this (columns and index entries; see
#: "Mutations per commit (including indexes)" in https://cloud.google.com/spanner/quotas).
MAX_MUTATIONS_PER_COMMIT = 80_000

#: Spanner's commit size limit ("Commit size (including indexes and change streams)": 100 MB).
MAX_COMMIT_BYTES = 100 * 1000 * 1000

_MIB = 1024 * 1024


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, got {value!r}")
    return value


def _as_timedelta(value: Any, name: str) -> timedelta:
    what = f"SpannerWriterOptions.{name}"
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
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class SpannerWriterOptions:
    """How each subtask batches the mutations of all tables into commits.

    A subtask fills one commit with the mutations of every table, in arrival order, until the
    next record would take it over ``max_mutations_per_commit`` (counted like Spanner counts:
    columns plus index entries, from the schema read when the writer opens) or
    ``max_commit_bytes``. It then commits it in the background, on one thread per subtask so
    that commits apply in order, while the next one fills. Everything still buffered is
    committed and awaited before every checkpoint barrier, at the end of input, and at the
    latest every ``flush_interval`` or ``flush_max_records`` records.

    Build with :meth:`builder`::

        SpannerWriterOptions.builder().max_mutations_per_commit(10_000).build()

    Attributes:
        max_mutations_per_commit: The mutation budget of one commit. Spanner's limit is 80,000;
            the default leaves room for the parts of Spanner's count that cannot be known in
            advance (range deletes, index changes during a schema change).
        max_commit_bytes: Encoded bytes of one commit request (Spanner's limit is 100 MB).
        max_pending_commits: Full commits waiting or in flight; beyond it, writing blocks until
            one completes (backpressure).
        flush_interval: Longest time a record waits before a full flush.
        flush_max_records: Records per subtask between full flushes.
        retry_deadline: Total time spent retrying one commit that fails transiently (ABORTED,
            UNAVAILABLE, ...) before the job fails.
        commit_timeout: Timeout of one commit attempt.
    """

    max_mutations_per_commit: int = 20_000
    max_commit_bytes: int = 8 * _MIB
    max_pending_commits: int = 2
    flush_interval: timedelta = timedelta(seconds=1)
    flush_max_records: int = 100_000
    retry_deadline: timedelta = timedelta(minutes=2)
    commit_timeout: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        for name in (
            "max_mutations_per_commit",
            "max_commit_bytes",
            "max_pending_commits",
            "flush_max_records",
        ):
            _positive_int(getattr(self, name), f"SpannerWriterOptions.{name}")
        if self.max_mutations_per_commit > MAX_MUTATIONS_PER_COMMIT:
            raise ConfigurationError(
                f"SpannerWriterOptions.max_mutations_per_commit={self.max_mutations_per_commit} "
                f"exceeds Spanner's limit of {MAX_MUTATIONS_PER_COMMIT:,} mutations per commit"
            )
        if self.max_commit_bytes > MAX_COMMIT_BYTES:
            raise ConfigurationError(
                f"SpannerWriterOptions.max_commit_bytes={self.max_commit_bytes} exceeds "
                f"Spanner's commit size limit of {MAX_COMMIT_BYTES:,} bytes"
            )
        for name in ("flush_interval", "retry_deadline", "commit_timeout"):
            object.__setattr__(self, name, _as_timedelta(getattr(self, name), name))
        if self.flush_interval < timedelta(milliseconds=1):
            raise ConfigurationError("SpannerWriterOptions.flush_interval must be at least 1 ms")

    @staticmethod
    def builder() -> SpannerWriterOptionsBuilder:
        return SpannerWriterOptionsBuilder()

    @staticmethod
    def defaults() -> SpannerWriterOptions:
        return SpannerWriterOptions()


class SpannerWriterOptionsBuilder:
    """Fluent builder of :class:`SpannerWriterOptions`; each method sets the field of its name.

    Durations take a ``timedelta`` or a number of seconds. Values are validated at
    :meth:`build`.
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> SpannerWriterOptionsBuilder:
        self._values[name] = value
        return self

    def max_mutations_per_commit(self, mutations: int) -> SpannerWriterOptionsBuilder:
        return self._set("max_mutations_per_commit", mutations)

    def max_commit_bytes(self, size: int) -> SpannerWriterOptionsBuilder:
        return self._set("max_commit_bytes", size)

    def max_pending_commits(self, commits: int) -> SpannerWriterOptionsBuilder:
        return self._set("max_pending_commits", commits)

    def flush_interval(self, interval: timedelta | float) -> SpannerWriterOptionsBuilder:
        return self._set("flush_interval", interval)

    def flush_max_records(self, records: int) -> SpannerWriterOptionsBuilder:
        return self._set("flush_max_records", records)

    def retry_deadline(self, deadline: timedelta | float) -> SpannerWriterOptionsBuilder:
        return self._set("retry_deadline", deadline)

    def commit_timeout(self, timeout: timedelta | float) -> SpannerWriterOptionsBuilder:
        return self._set("commit_timeout", timeout)

    def build(self) -> SpannerWriterOptions:
        return replace(SpannerWriterOptions(), **self._values)
