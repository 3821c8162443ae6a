"""Options of the Spanner sink: how each subtask batches mutations into commits and retries them.

Spanner has one fixed destination, the database, and one writer per subtask, so its options
derive from :class:`~pyflink_gcp.core.options.WriterOptions` alone (no idle timeout, no cap on
active destinations, nothing created).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Self

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import (
    OptionsBuilder,
    WriterOptions,
    check_duration,
    check_int,
    duration_text,
)

#: Spanner rejects a commit counting more mutations than this (columns and index entries; see
#: "Mutations per commit (including indexes)" in https://cloud.google.com/spanner/quotas).
MAX_MUTATIONS_PER_COMMIT = 80_000

#: Spanner's commit size limit ("Commit size (including indexes and change streams)": 100 MB).
MAX_COMMIT_BYTES = 100 * 1000 * 1000

#: The longest ``max_commit_delay`` Spanner accepts (it rejects a longer one).
MAX_COMMIT_DELAY = timedelta(milliseconds=500)

_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class SpannerWriterOptions(WriterOptions):
    """How each subtask batches the mutations of all tables into commits.

    A subtask fills one commit with the mutations of every table, in arrival order, until the
    next record would take it over ``max_mutations_per_commit`` (counted like Spanner counts:
    columns plus index entries, from the schema read when the writer opens) or
    ``max_commit_bytes``. It then commits it in the background, on one thread per subtask so
    that commits apply in order, while the next one fills. Everything still buffered is
    committed and awaited before every checkpoint barrier and at the end of input, and sent at
    the latest every ``max_buffer_time`` or ``max_buffered_records`` records.

    With ``grouping_factor`` above 1 the subtask instead buffers that many commits' worth,
    sorts it by table and primary key (the mutations of one row keep their order) and cuts it
    into commits by ``max_mutations_per_commit``, ``max_commit_bytes`` and
    ``max_rows_per_commit`` (:mod:`~pyflink_gcp.spanner.grouping`).

    Build with :meth:`builder`::

        SpannerWriterOptions.builder().max_mutations_per_commit(10_000).build()

    Attributes:
        max_buffered_records: Records per subtask between two bundle ends (default 100,000:
            without checkpoint markers every bundle end waits for the commits).
        max_in_flight_requests: Full commits waiting or in flight (default 2); beyond it,
            writing blocks until one completes (backpressure). Commits of one subtask run one
            after the other, so that they apply in order.
        retry_deadline: Total time spent retrying one commit that fails transiently (ABORTED,
            UNAVAILABLE, ...) before the job fails.
        per_destination_metrics: Register Flink counters for the database (the sink's one
            destination).
        max_mutations_per_commit: The mutation budget of one commit. Spanner's limit is 80,000;
            the default leaves room for the parts of Spanner's count that cannot be known in
            advance (range deletes, index changes during a schema change).
        max_commit_bytes: Encoded bytes of one commit request (Spanner's limit is 100 MB).
        max_rows_per_commit: Rows of one commit: one per row written and per key or range
            deleted (None, the default: only the two budgets above cut commits).
        commit_timeout: Timeout of one commit attempt (the commit deadline).
        grouping_factor: With more than 1, the writer buffers up to this many commits' worth
            of mutations (``grouping_factor`` times each of the three limits), sorts them by
            table and primary key, then cuts commits by the limits, so that each commit
            touches fewer of Spanner's splits. 1 (the default) commits in arrival order.
        max_commit_delay: Spanner's ``max_commit_delay`` commit option, 0 to 500 ms: how long
            Spanner may hold a commit to group it with others (throughput-optimized writes).
            None (the default) does not send it, and Spanner picks.
        max_cumulative_backoff: Total time one commit may spend waiting between its retries
            before the job fails; ``retry_deadline`` also bounds the time of the attempts
            themselves. None (the default): only ``retry_deadline`` bounds the retries.
    """

    max_buffered_records: int = 100_000
    max_in_flight_requests: int = 2
    max_mutations_per_commit: int = 20_000
    max_commit_bytes: int = 8 * _MIB
    commit_timeout: timedelta = timedelta(seconds=60)
    max_rows_per_commit: int | None = None
    grouping_factor: int = 1
    max_commit_delay: timedelta | None = None
    max_cumulative_backoff: timedelta | None = None

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        check_int(owner, "max_mutations_per_commit", self.max_mutations_per_commit)
        if self.max_mutations_per_commit > MAX_MUTATIONS_PER_COMMIT:
            raise ConfigurationError(
                f"{owner}.max_mutations_per_commit must be at most {MAX_MUTATIONS_PER_COMMIT:,} "
                f"(Spanner's limit of mutations per commit), got {self.max_mutations_per_commit!r}"
            )
        check_int(owner, "max_commit_bytes", self.max_commit_bytes)
        if self.max_commit_bytes > MAX_COMMIT_BYTES:
            raise ConfigurationError(
                f"{owner}.max_commit_bytes must be at most {MAX_COMMIT_BYTES:,} "
                f"(Spanner's commit size limit), got {self.max_commit_bytes!r}"
            )
        if self.max_rows_per_commit is not None:
            check_int(owner, "max_rows_per_commit", self.max_rows_per_commit)
        check_duration(owner, "commit_timeout", self.commit_timeout)
        check_int(owner, "grouping_factor", self.grouping_factor)
        if self.max_commit_delay is not None:
            check_duration(owner, "max_commit_delay", self.max_commit_delay, allow_zero=True)
            if self.max_commit_delay > MAX_COMMIT_DELAY:
                raise ConfigurationError(
                    f"{owner}.max_commit_delay must be at most 500 ms (Spanner rejects a "
                    f"longer commit delay), got {duration_text(self.max_commit_delay)}"
                )
        if self.max_cumulative_backoff is not None:
            check_duration(owner, "max_cumulative_backoff", self.max_cumulative_backoff)

    @property
    def grouping(self) -> bool:
        """Whether the writer sorts a group of commits' mutations by table and key."""
        return self.grouping_factor > 1

    @staticmethod
    def builder() -> SpannerWriterOptionsBuilder:
        """A builder starting from the defaults."""
        return SpannerWriterOptionsBuilder()


class SpannerWriterOptionsBuilder(OptionsBuilder[SpannerWriterOptions]):
    """Builder of :class:`SpannerWriterOptions`: the shared setters plus the commit limits.

    Values are validated at :meth:`build`.
    """

    options_type = SpannerWriterOptions

    def max_mutations_per_commit(self, mutations: int) -> Self:
        """The mutation budget of one commit, as Spanner counts it (default 20,000; max 80,000)."""
        return self._set("max_mutations_per_commit", mutations)

    def max_commit_bytes(self, size: int) -> Self:
        """Encoded bytes of one commit request (default 8 MiB; at most 100 MB)."""
        return self._set("max_commit_bytes", size)

    def max_rows_per_commit(self, rows: int | None) -> Self:
        """Rows written or keys deleted per commit (default None: no bound of its own)."""
        return self._set("max_rows_per_commit", rows)

    def commit_timeout(self, timeout: timedelta) -> Self:
        """Timeout of one commit attempt, the commit deadline (default 60 s)."""
        return self._set("commit_timeout", timeout)

    def grouping_factor(self, factor: int) -> Self:
        """Sort up to ``factor`` commits' worth of mutations by table and key before cutting
        commits (default 1: off, arrival order)."""
        return self._set("grouping_factor", factor)

    def max_commit_delay(self, delay: timedelta | None) -> Self:
        """Spanner's ``max_commit_delay`` commit option, 0 to 500 ms (default None: not sent)."""
        return self._set("max_commit_delay", delay)

    def max_cumulative_backoff(self, backoff: timedelta | None) -> Self:
        """Total wait between the retries of one commit before the job fails (default None:
        ``retry_deadline`` alone bounds them)."""
        return self._set("max_cumulative_backoff", backoff)
