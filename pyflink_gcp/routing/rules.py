"""Routing rules updated while the job runs, from a second stream, kept in broadcast state.

```python
rules = LiveRules("region", pubsub_topics("p"), initial={"eu": "orders-eu"},
                  fallback=TopicDestination.of("p", "orders-other"))
routed = rules.apply(orders, rule_changes)       # rule_changes: a DataStream of changes
routed.sink_to(PubSubSink.builder().set_destination_resolver(rules.resolver())...build())
```

A change is a dict, or its JSON text (``str`` or ``bytes``, e.g. the lines of a file source):
``{"value": "eu", "destination": "orders-eu-2"}`` routes the value ``eu`` there from now on;
``{"value": "eu", "destination": null}`` deletes the rule, and records with that value go to
the fallback. A change that is not one of these is logged and ignored (a rules feed must not
stop the job).

How it holds: the change stream is broadcast to every parallel instance of the routing
operator, which keeps the rules in Flink's broadcast state (so a restored job routes by the
rules it had at its checkpoint, even though the rule source will not replay the change) and
in a dict for the per-record lookup. Each instance applies a change before the next record it
processes after the change; Flink does not order the records of two inputs against each
other, so *which* record is the first one routed by a new rule depends on arrival, and every
record is routed by exactly one version of the rules. The operator emits each record with
the name of its destination (:class:`Routed`); :meth:`LiveRules.resolver` turns the name into
the sink's destination and gives the sink's serializer the record itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pyflink.datastream.functions import BroadcastProcessFunction

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.types import Destination, UnroutableRecord, WriterContext
from pyflink_gcp.routing._helpers import MISSING
from pyflink_gcp.routing.fields import UNPARSEABLE, FieldPath
from pyflink_gcp.routing.resolvers import DestinationNames, _payload, _Routing

_LOG = logging.getLogger("pyflink_gcp.routing")
#: The broadcast state of the rules: field value → destination name.
STATE_NAME = "pyflink-gcp-routing-rules"
#: Names of destinations the resolver keeps built, at most.
_CACHE_SIZE = 4_096


class Routed:
    """A record and the name of the destination the rules chose for it (None: the fallback;
    an UnroutableRecord: the failure handler)."""

    __slots__ = ("name", "record")

    def __init__(self, name: str | UnroutableRecord | None, record: Any) -> None:
        self.name = name
        self.record = record

    def __reduce__(self) -> tuple[Any, ...]:
        return (Routed, (self.name, self.record))

    def __repr__(self) -> str:
        return f"Routed({self.name!r}, {short_repr(self.record)})"


def parse_change(change: Any) -> tuple[Any, str | None] | None:
    """``(value, destination name or None for a deletion)``, or None for a malformed change."""
    if isinstance(change, bytes | bytearray):
        change = bytes(change).decode("utf-8", errors="replace")
    if isinstance(change, str):
        try:
            change = json.loads(change)
        except ValueError:
            return None
    if not isinstance(change, Mapping) or "value" not in change or "destination" not in change:
        return None
    destination = change["destination"]
    if destination is not None and not (isinstance(destination, str) and destination):
        return None
    try:
        hash(change["value"])
    except TypeError:
        return None
    return change["value"], destination


class LiveRules(_Routing):
    """Field routing whose value → destination rules change while the job runs.

    Args:
        path: The routing field (see :class:`~pyflink_gcp.routing.fields.FieldPath`).
        to: Destination names to destinations (e.g.
            :func:`~pyflink_gcp.routing.resolvers.pubsub_topics`), on the sink's side.
        initial: The rules before any change arrives (value → destination name).
        fallback: Where a record goes whose field is missing or unparseable, or whose value
            has no rule (never had one, or its rule was deleted).
        unroutable: Send those records to the failure handler instead (an UnroutableRecord).
    """

    def __init__(
        self,
        path: str,
        to: DestinationNames | Callable[[str], Destination],
        *,
        initial: Mapping[Any, str] | None = None,
        fallback: Destination | None = None,
        unroutable: bool = False,
    ) -> None:
        super().__init__(fallback, unroutable, f"LiveRules({path!r})")
        if not callable(to):
            raise ConfigurationError(
                f"LiveRules({path!r}): 'to' turns a destination name into a destination, e.g. "
                f"pubsub_topics(project); got {to!r}"
            )
        self.path = FieldPath(path)
        self.to = to
        self.initial = dict(initial or {})
        for value, name in self.initial.items():
            if not isinstance(name, str) or not name:
                raise ConfigurationError(
                    f"LiveRules({path!r}): the rule of {value!r} must name a destination, "
                    f"got {name!r}"
                )
            self._build(name)  # a name the service refuses fails now, not per record

    def _build(self, name: str) -> Destination:
        rule = getattr(self.to, "rule", None)
        if rule is not None:
            reason = rule.validate(name)
            if reason is not None:
                raise ConfigurationError(f"{self!r}: destination name {name!r}: {reason}")
        return self.to(name)

    def apply(self, records: Any, changes: Any, name: str = "live routing rules") -> Any:
        """``records`` routed by the rules, changed by ``changes``: a stream of
        :class:`Routed` for a sink built with :meth:`resolver`."""
        from pyflink.common.typeinfo import Types

        descriptor = _descriptor()
        # PyFlink 2.3's Python operator chaining fails on a broadcast operator fed by a Python
        # operator (NoSuchFieldException: regularInput); a forward partition between them
        # keeps the records local and in order without chaining them.
        parallelism = records._j_data_stream.getParallelism()
        routed = (
            records.forward()
            .connect(changes.broadcast(descriptor))
            .process(_RuleApplier(self), output_type=Types.PICKLED_BYTE_ARRAY())
            .name(name)
        )
        return routed.set_parallelism(parallelism) if parallelism > 0 else routed

    def resolver(self) -> RoutedResolver:
        """The sink's resolver: a :class:`Routed` record's destination, and the record
        inside for the serializer."""
        return RoutedResolver(self)

    def route(self, rules: Mapping[Any, str], record: Any) -> Routed:
        """The routing decision for ``record`` under ``rules``."""
        value = self.path.get(record)
        if value is MISSING or value is UNPARSEABLE:
            reason = f"no field {self.path.path!r}" if value is MISSING else "not a JSON object"
            return Routed(self._fallback_name(record, reason), record)
        try:
            name = rules.get(value)
        except TypeError:
            name = None
        if name is None:
            reason = f"no rule for {self.path.path}={short_repr(value)}"
            return Routed(self._fallback_name(record, reason), record)
        return Routed(name, record)

    def _fallback_name(self, record: Any, reason: str) -> UnroutableRecord | None:
        if self.unroutable:
            return UnroutableRecord.of(_payload(record), reason)
        return None

    def __repr__(self) -> str:
        end = f"fallback={self.fallback}" if self.fallback is not None else "unroutable"
        return f"LiveRules({self.path.path!r}, {self.to!r}, {end})"


def _descriptor() -> Any:
    from pyflink.common.typeinfo import Types
    from pyflink.datastream.state import MapStateDescriptor

    return MapStateDescriptor(STATE_NAME, Types.PICKLED_BYTE_ARRAY(), Types.STRING())


class _RuleApplier(BroadcastProcessFunction):
    """The routing operator: rules in broadcast state and a dict; one :class:`Routed` per
    record."""

    def __init__(self, rules: LiveRules) -> None:
        self._rules = rules
        self._descriptor = _descriptor()
        self._current: dict[Any, str] | None = None

    def _load(self, state: Any) -> dict[Any, str]:
        # After a restore the broadcast state holds the rules of the checkpoint; a fresh job
        # starts from the initial rules (written to the state with the first change).
        current = dict(self._rules.initial)
        loaded = dict(state.items()) if state is not None else {}
        if loaded:
            current = {k: v for k, v in loaded.items() if v}
        self._current = current
        return current

    def process_element(self, value: Any, ctx: Any) -> Any:
        current = self._current
        if current is None:
            current = self._load(ctx.get_broadcast_state(self._descriptor))
        yield self._rules.route(current, value)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        parsed = parse_change(value)
        if parsed is None:
            _LOG.warning("%r: ignored a malformed rule change %s", self._rules, short_repr(value))
            return
        state = ctx.get_broadcast_state(self._descriptor)
        current = self._current
        if current is None:
            current = self._load(state)
        if state.is_empty():
            # The first change: the initial rules become state too, so a restore keeps them.
            for initial_value, initial_name in current.items():
                state.put(initial_value, initial_name)
        key, name = parsed
        if name is None:
            current.pop(key, None)
            state.put(key, "")  # an empty name is a deleted rule (kept: state has no tombstone)
        else:
            try:
                self._rules._build(name)
            except ConfigurationError as exc:
                _LOG.warning("%r: ignored a rule change: %s", self._rules, exc)
                return
            current[key] = name
            state.put(key, name)
        _LOG.info("%r: rule %r -> %s", self._rules, key, name or "(deleted)")


class RoutedResolver:
    """The sink-side half of :class:`LiveRules`: the destination of a :class:`Routed`."""

    def __init__(self, rules: LiveRules) -> None:
        self.rules = rules
        self._cache: dict[str, Destination] = {}

    def resolve(self, routed: Any, context: WriterContext) -> Any:
        if type(routed) is not Routed:
            raise ConfigurationError(
                f"{self.rules!r}: the sink's records must come from LiveRules.apply(), got "
                f"{short_repr(routed)}"
            )
        name = routed.name
        if name is None:
            return self.rules.fallback
        if isinstance(name, UnroutableRecord):
            return name
        destination = self._cache.get(name)
        if destination is None:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            destination = self._cache[name] = self.rules.to(name)
        return destination

    __call__ = resolve

    @staticmethod
    def record_of(routed: Routed) -> Any:
        """The record the serializer sees."""
        return routed.record

    def check_sink(self, sink_name: str, destination_type: type, accepts_unroutable: bool) -> None:
        self.rules.check_sink(sink_name, destination_type, accepts_unroutable)
        for name in self.rules.initial.values():
            destination = self.rules.to(name)
            if not isinstance(destination, destination_type):
                raise ConfigurationError(
                    f"sink '{sink_name}': {self.rules!r} names {destination!r}, which is not a "
                    f"{destination_type.__name__}"
                )

    def __getstate__(self) -> dict[str, Any]:
        return {"rules": self.rules}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.rules = state["rules"]
        self._cache = {}

    def __repr__(self) -> str:
        return f"{self.rules!r}.resolver()"
