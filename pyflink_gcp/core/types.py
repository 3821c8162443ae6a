"""Contract value types shared by every sink: destinations, the writer context, unroutable records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Self

#: The variable a destination built without a project takes its project from.
PROJECT_VARIABLE = "GOOGLE_CLOUD_PROJECT"

#: Destinations ``of()`` keeps built, of every type together, at most; the cache is emptied
#: when full, so a resolver naming a new destination per record cannot grow it without bound.
MAX_BUILT_DESTINATIONS = 4_096
_BUILT: dict[tuple[Any, ...], Destination] = {}

# Flink encodes "no timestamp" as Long.MIN_VALUE; anything this far in the past is treated as absent.
_NO_TIMESTAMP_BELOW = -(2**62)


class Destination:
    """Base of every destination value (a table, a topic, a queue, a database).

    A destination is immutable and identified by its resource name: equality and hash are the
    resource name, and ``str(d)`` is the resource name. Two destinations built separately for
    the same resource therefore reach the same writer state in the registry.

    Subclasses set ``_name`` once in ``__init__`` (through :meth:`_init_name`) and never mutate,
    name their ids in ``_ids`` and implement ``of(*ids)`` with :meth:`_of`.
    """

    __slots__ = ("_name",)
    _name: str
    #: The names of the ids ``of()`` takes, the project first (``("project", "topic")``).
    _ids: ClassVar[tuple[str, ...]] = ()

    def _init_name(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    @classmethod
    def _of(cls, ids: tuple[Any, ...]) -> Self:
        """What every ``of(*ids)`` does: the destination of ``ids``, built once.

        Without the project, it is ``GOOGLE_CLOUD_PROJECT``'s (:func:`with_project`). Resolvers
        call ``of()`` once per record and most jobs name a handful of destinations, so a value
        built (and validated) once is kept, by its type and full ids, in one bounded cache
        shared by every destination type: the hot path is one dict lookup. Invalid ids are
        not kept; each call raises again.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
            TypeError: Neither the full number of ids nor one fewer.
        """
        if len(ids) != len(cls._ids):
            ids = with_project(cls.__name__, ids, cls._ids)
        key = (cls, ids)
        built = _BUILT.get(key)
        if built is None:
            built = cls(*ids)  # type: ignore[call-arg]
            if len(_BUILT) >= MAX_BUILT_DESTINATIONS:
                _BUILT.clear()
            _BUILT[key] = built
        return built  # type: ignore[return-value]

    @property
    def resource_name(self) -> str:
        """The full resource name, e.g. ``projects/p/topics/t``."""
        return self._name

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Destination):
            return self._name == other._name and type(self) is type(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._name)

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_destination, (type(self), self._name))


def with_project(kind: str, ids: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    """The full ids of a destination, the project first, given with or without it.

    A destination built without its project takes ``GOOGLE_CLOUD_PROJECT`` from the process
    that builds it, so one job runs unchanged in every project it is deployed to. The value is
    read when the destination is built and is part of its resource name: resolvers run on the
    task managers, so the variable must be set there (a MiniCluster inherits it from the
    client's environment).

    Args:
        kind: The destination class, for messages (``TopicDestination``).
        ids: The ids the caller passed.
        names: The names of all the ids, the project first (``("project", "topic")``).

    Raises:
        ValueError: The project was left out and ``GOOGLE_CLOUD_PROJECT`` is not set.
        TypeError: Neither the full number of ids nor one fewer.
    """
    if len(ids) == len(names):
        return ids
    if len(ids) != len(names) - 1:
        raise TypeError(
            f"{kind}.of({', '.join(names)}) or {kind}.of({', '.join(names[1:])}) in the project "
            f"{PROJECT_VARIABLE} names; got {len(ids)} argument(s) {ids!r}"
        )
    project = os.environ.get(PROJECT_VARIABLE)
    if not project:
        raise ValueError(
            f"{kind}.of({', '.join(map(repr, ids))}) names no project and {PROJECT_VARIABLE} is "
            f"not set in this process; pass the project first ({kind}.of('my-project', ...)) or "
            f"set {PROJECT_VARIABLE} where the destination is built (for a resolver: on the "
            "task managers)"
        )
    return (project, *ids)


def _rebuild_destination(cls: type[Destination], name: str) -> Destination:
    obj = cls.__new__(cls)
    obj._init_name(name)
    return obj


@dataclass(frozen=True, slots=True)
class UnroutableRecord:
    """What a resolver returns for a record that has no valid destination.

    It creates no per-destination state and never reaches the serializer; the sink's failure
    handler decides what happens to it (fail the job, drop it, or dead-letter ``payload`` with
    ``dlq-destination=unresolved``). Every sink of this package accepts it. A sink without a
    resolver (Spanner, whose mutations name their tables) takes it from its serializer
    instead, for a record that names no valid table.

    Attributes:
        payload: The bytes to dead-letter.
        reason: Why the record could not be routed; carried to the dead-letter queue.
    """

    payload: bytes
    reason: str

    @staticmethod
    def of(payload: bytes, reason: str) -> UnroutableRecord:
        if not isinstance(payload, bytes | bytearray):
            raise TypeError(f"UnroutableRecord payload must be bytes, got {type(payload).__name__}")
        return UnroutableRecord(bytes(payload), str(reason))


class WriterContext:
    """What a resolver and a serializer may know about the record being written.

    Deliberately excludes the wall clock: a replay after a failure must route every record the
    same way it was routed the first time, so only event time and the subtask's identity are
    exposed. One instance is reused for every record of a subtask; read it during the call only.

    Attributes:
        timestamp: The record's event timestamp in epoch milliseconds, or None when it has none.
        current_watermark: The operator's current event-time watermark in epoch milliseconds.
        subtask_index: The index of the writing subtask, from 0.
        number_of_parallel_subtasks: The writer's parallelism.
    """

    __slots__ = ("timestamp", "current_watermark", "subtask_index", "number_of_parallel_subtasks")

    def __init__(
        self,
        timestamp: int | None = None,
        current_watermark: int = -(2**63),
        subtask_index: int = 0,
        number_of_parallel_subtasks: int = 1,
    ) -> None:
        self.timestamp = timestamp
        self.current_watermark = current_watermark
        self.subtask_index = subtask_index
        self.number_of_parallel_subtasks = number_of_parallel_subtasks

    def _set_time(self, timestamp: int | None, watermark: int | None) -> None:
        if timestamp is not None and timestamp < _NO_TIMESTAMP_BELOW:
            timestamp = None
        self.timestamp = timestamp
        if watermark is not None:
            self.current_watermark = watermark

    def __repr__(self) -> str:
        return (
            f"WriterContext(timestamp={self.timestamp}, current_watermark={self.current_watermark},"
            f" subtask_index={self.subtask_index},"
            f" number_of_parallel_subtasks={self.number_of_parallel_subtasks})"
        )
