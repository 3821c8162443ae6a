"""The options vocabulary every sink shares, and the one builder base all options builders use.

A user who learned one sink's options knows them all: the settings every sink has are declared
once here, with one name, one type (``timedelta`` for durations) and one error
(:class:`~pyflink_gcp.core.errors.ConfigurationError` naming the option and the value). Each
service's ``<Service>WriterOptions`` derives from the base that fits it and adds only the
settings of its own service (batch shapes, ordering, commit limits):

- :class:`WriterOptions`: every sink. ``max_buffer_time``, ``max_buffered_records``,
  ``retry_deadline``, ``max_in_flight_requests``, ``per_destination_metrics``,
  ``max_carry_time``, ``max_carried_records``.
- :class:`DestinationWriterOptions`: sinks that keep a writer per destination (Pub/Sub,
  BigQuery, Bigtable, Cloud Tasks) add ``idle_timeout`` and ``max_active_destinations``.
- :class:`CreatingWriterOptions`: sinks that may create their destinations (Pub/Sub, BigQuery,
  Bigtable) add ``max_created_destinations`` per ``max_created_destinations_per``.

The sink builder base reads these fields directly, so no service remaps a name. Options are
frozen values: a builder collects settings and validates them all at ``build()``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, ClassVar, Generic, Self, TypeVar

from pyflink_gcp.core.carry import DEFAULT_MAX_CARRIED_RECORDS, CarrySettings
from pyflink_gcp.core.creation import DEFAULT_MAX_CREATED, DEFAULT_WINDOW
from pyflink_gcp.core.errors import ConfigurationError


class CreateDisposition(enum.Enum):
    """Whether a sink may create a destination its resolver names (a topic, a table).

    ``CREATE_NEVER`` (every sink's default) fails the job with an error naming a missing
    destination. ``CREATE_IF_NEEDED`` creates it on first use, at most
    ``max_created_destinations`` per subtask and ``max_created_destinations_per`` window
    (:mod:`pyflink_gcp.core.creation`).
    """

    CREATE_NEVER = "CREATE_NEVER"
    CREATE_IF_NEEDED = "CREATE_IF_NEEDED"


# -- validation helpers: one message shape for every option of every sink ---------------------


def duration_text(value: timedelta) -> str:
    """``value`` as a user wrote it: ``600 ms``, ``30 s`` (not ``timedelta``'s own repr, which
    counts microseconds)."""
    ms = value / timedelta(milliseconds=1)
    if ms and ms % 1000 == 0:
        return f"{int(ms // 1000):,} s"
    return f"{ms:,.3f}".rstrip("0").rstrip(".") + " ms"


def option_value_text(value: Any) -> str:
    """An option's value in an error: a duration as :func:`duration_text`, else its repr."""
    return duration_text(value) if isinstance(value, timedelta) else repr(value)


def _bad(owner: str, name: str, value: Any, expected: str) -> ConfigurationError:
    return ConfigurationError(f"{owner}.{name} must be {expected}, got {option_value_text(value)}")


def check_int(
    owner: str, name: str, value: Any, *, minimum: int = 1, maximum: int | None = None
) -> None:
    """Raise unless ``value`` is an int in ``[minimum, maximum]`` (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(owner, name, value, "an integer")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum:,}" if maximum is None else f"in [{minimum:,}, {maximum:,}]"
        raise _bad(owner, name, value, bound)


def check_duration(
    owner: str, name: str, value: Any, *, allow_zero: bool = False, minimum: timedelta | None = None
) -> None:
    """Raise unless ``value`` is a positive ``timedelta`` (or zero, where allowed)."""
    if not isinstance(value, timedelta):
        raise _bad(owner, name, value, "a datetime.timedelta, e.g. timedelta(seconds=1)")
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        raise _bad(owner, name, value, ">= 0" if allow_zero else "positive")
    if minimum is not None and value < minimum:
        raise _bad(owner, name, value, f"at least {minimum}")


def check_bool(owner: str, name: str, value: Any) -> None:
    """Raise unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise _bad(owner, name, value, "True or False")


def check_instance(owner: str, name: str, value: Any, kind: type, example: str) -> None:
    """Raise unless ``value`` is a ``kind``."""
    if not isinstance(value, kind):
        raise _bad(owner, name, value, f"a {kind.__name__} ({example})")


# -- the options values ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WriterOptions:
    """The settings every sink has. Services subclass it and may change a default.

    Attributes:
        max_buffer_time: Longest time a record waits before it is sent when no checkpoint
            comes first (the writer operator's bundle time).
        max_buffered_records: Records a subtask accepts between two bundle ends (the writer
            operator's bundle size): a bundle end sends what is buffered, so this bounds the
            records held in memory.
        retry_deadline: How long transient errors of one call are retried (exponential backoff
            with jitter) before the job fails.
        max_in_flight_requests: Write calls sent before the first is answered; what one
            request is (a publish, an append, a commit, a task) and whether the bound is per
            destination or per subtask is said by each service's options.
        per_destination_metrics: Register Flink counters per destination. Flink cannot
            unregister metrics, so this is off by default (many destinations, many metrics).
        max_carry_time: How long a destination's records may wait across checkpoints, kept in
            the checkpoint's state instead of sent before its barrier (None, the default: each
            checkpoint sends everything). A destination's records are sent once 500 wait, the
            oldest is this old, or the subtask carries ``max_carried_records``; for sinks with
            many destinations and few records each per checkpoint, so that a call carries many
            records (:mod:`pyflink_gcp.core.carry`). At-least-once writes on plain streams
            only.
        max_carried_records: Records one subtask carries at most under ``max_carry_time``;
            beyond, the destinations carried longest are sent.
    """

    max_buffer_time: timedelta = timedelta(seconds=1)
    max_buffered_records: int = 20_000
    retry_deadline: timedelta = timedelta(minutes=2)
    max_in_flight_requests: int = 4
    per_destination_metrics: bool = False
    max_carry_time: timedelta | None = None
    max_carried_records: int = DEFAULT_MAX_CARRIED_RECORDS

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        """Check every field; subclasses extend it (calling ``super()._validate()`` first)."""
        owner = type(self).__name__
        check_duration(owner, "max_buffer_time", self.max_buffer_time, minimum=_ONE_MS)
        check_int(owner, "max_buffered_records", self.max_buffered_records)
        check_duration(owner, "retry_deadline", self.retry_deadline, allow_zero=True)
        check_int(owner, "max_in_flight_requests", self.max_in_flight_requests)
        check_bool(owner, "per_destination_metrics", self.per_destination_metrics)
        if self.max_carry_time is not None:
            check_duration(owner, "max_carry_time", self.max_carry_time, minimum=_ONE_MS)
        check_int(owner, "max_carried_records", self.max_carried_records)

    @property
    def retry_deadline_s(self) -> float:
        """``retry_deadline`` in seconds."""
        return self.retry_deadline.total_seconds()

    @property
    def carry(self) -> CarrySettings:
        """``max_carry_time`` and ``max_carried_records`` as the writer takes them."""
        seconds = None if self.max_carry_time is None else self.max_carry_time.total_seconds()
        return CarrySettings(seconds, self.max_carried_records)


_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, kw_only=True)
class DestinationWriterOptions(WriterOptions):
    """The settings of sinks that keep a writer per destination in a per-subtask registry.

    Attributes:
        idle_timeout: A destination's writer unused this long is closed at the end of a
            successful flush, and re-created transparently when the destination is used again.
            Zero closes every writer at each flush; None keeps writers until the task ends.
        max_active_destinations: At most this many destination writers live per subtask; the
            least recently used clean one is released first (None: no cap).
    """

    idle_timeout: timedelta | None = timedelta(minutes=15)
    max_active_destinations: int | None = None

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        if self.idle_timeout is not None:
            check_duration(owner, "idle_timeout", self.idle_timeout, allow_zero=True)
        if self.max_active_destinations is not None:
            check_int(owner, "max_active_destinations", self.max_active_destinations)

    @property
    def idle_timeout_s(self) -> float | None:
        """``idle_timeout`` in seconds, or None."""
        return None if self.idle_timeout is None else self.idle_timeout.total_seconds()


@dataclass(frozen=True, kw_only=True)
class CreatingWriterOptions(DestinationWriterOptions):
    """The settings of sinks that may create the destinations their resolver names.

    Attributes:
        max_created_destinations: How many destinations one sink subtask may create under
            ``CreateDisposition.CREATE_IF_NEEDED`` at once, and then per
            ``max_created_destinations_per`` (default 500: a year of daily tables at once). A
            resolver bug (a table per user id instead of per day) must fail fast, not create a
            million resources: one more fails the job with
            :class:`~pyflink_gcp.core.errors.CreationLimitExceededError` naming the bound, the
            resolver and the count. 0: the sink creates nothing.
        max_created_destinations_per: The window of the budget (default 1 hour): a token
            bucket of ``max_created_destinations`` tokens refilled at that many per window, so
            a job creating a destination per day or per hour runs forever
            (:class:`~pyflink_gcp.core.creation.CreationBudget`). Counted per subtask from its
            start; a restarted subtask starts with a full budget.
    """

    max_created_destinations: int = DEFAULT_MAX_CREATED
    max_created_destinations_per: timedelta = DEFAULT_WINDOW

    def _validate(self) -> None:
        super()._validate()
        check_int(
            type(self).__name__,
            "max_created_destinations",
            self.max_created_destinations,
            minimum=0,
        )
        check_duration(
            type(self).__name__, "max_created_destinations_per", self.max_created_destinations_per
        )


# -- the builders ---------------------------------------------------------------------------

O = TypeVar("O", bound=WriterOptions)  # noqa: E741 - the conventional name of an options type


class OptionsBuilder(Generic[O]):
    """Collects settings by name and builds (and validates) the options value at :meth:`build`.

    Each setter stores one field of the same name; a subclass names its options type in
    ``options_type`` and adds one-line setters for the settings of its service.
    """

    #: The frozen options dataclass this builder builds.
    options_type: ClassVar[type[Any]]

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> Self:
        self._values[name] = value
        return self

    def max_buffer_time(self, duration: timedelta) -> Self:
        """Longest time a record waits before it is sent (default 1 s)."""
        return self._set("max_buffer_time", duration)

    def max_buffered_records(self, records: int) -> Self:
        """Records a subtask holds between two bundle ends (bounds memory)."""
        return self._set("max_buffered_records", records)

    def retry_deadline(self, deadline: timedelta) -> Self:
        """How long transient errors of one call are retried before the job fails."""
        return self._set("retry_deadline", deadline)

    def max_in_flight_requests(self, requests: int) -> Self:
        """Write calls sent before the first is answered."""
        return self._set("max_in_flight_requests", requests)

    def per_destination_metrics(self, enabled: bool = True) -> Self:
        """Register Flink counters per destination (default off)."""
        return self._set("per_destination_metrics", enabled)

    def max_carry_time(self, duration: timedelta | None) -> Self:
        """Let a destination's records wait this long across checkpoints, in checkpoint
        state, to be sent in larger calls (default None: each checkpoint sends everything)."""
        return self._set("max_carry_time", duration)

    def max_carried_records(self, records: int) -> Self:
        """Records a subtask carries at most under ``max_carry_time`` (default 100,000)."""
        return self._set("max_carried_records", records)

    def build(self) -> O:
        """The options value; raises ConfigurationError naming the first bad setting."""
        options: O = self.options_type(**self._values)
        return options


class DestinationOptionsBuilder(OptionsBuilder[O]):
    """Adds the settings of sinks with a writer per destination."""

    def idle_timeout(self, timeout: timedelta | None) -> Self:
        """Close a destination's writer unused this long (0: at every flush; None: never)."""
        return self._set("idle_timeout", timeout)

    def max_active_destinations(self, count: int | None) -> Self:
        """Cap on live destination writers per subtask, released least recently used first."""
        return self._set("max_active_destinations", count)


class CreatingOptionsBuilder(DestinationOptionsBuilder[O]):
    """Adds the creation bound of sinks that may create destinations."""

    def max_created_destinations(self, count: int, per: timedelta = DEFAULT_WINDOW) -> Self:
        """How many destinations one subtask may create at once, and then ``per`` window
        (default 500 per hour; ``count`` alone means ``count`` per hour). One more fails the
        job with ``CreationLimitExceededError``."""
        self._set("max_created_destinations", count)
        return self._set("max_created_destinations_per", per)


def option_names(options_type: type[WriterOptions]) -> list[str]:
    """The field names of an options type, in declaration order (for docs and tests)."""
    return [f.name for f in fields(options_type)]
