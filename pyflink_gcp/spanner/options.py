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
from pyflink_gcp.core.options import OptionsBuilder, WriterOptions, check_duration, check_int

#: Spanner rejects a commit counting more mutations than this (columns and index entries; see
#: "Mutations per commit (including indexes)" in https://cloud.google.com/spanner/quotas).
MAX_MUTATIONS_PER_COMMIT = 80_000

#: Spanner's commit size limit ("Commit size (including indexes and change streams)": 100 MB).
MAX_COMMIT_BYTES = 100 * 1000 * 1000

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
        commit_timeout: Timeout of one commit attempt.
    """

    max_buffered_records: int = 100_000
    max_in_flight_requests: int = 2
    max_mutations_per_commit: int = 20_000
    max_commit_bytes: int = 8 * _MIB
    commit_timeout: timedelta = timedelta(seconds=60)

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
        check_duration(owner, "commit_timeout", self.commit_timeout)

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

    def commit_timeout(self, timeout: timedelta) -> Self:
        """Timeout of one commit attempt (default 60 s)."""
        return self._set("commit_timeout", timeout)
