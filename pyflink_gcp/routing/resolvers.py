"""Resolvers without hand-written code: route by a field's value, or by a name template.

Both are the resolver shapes most jobs write by hand (the content-routing idiom: read one
field, map it, send what is missing, unmatched or unparseable to a default destination; and a
name built from record fields and event time), as picklable objects a sink checks when it is
built: every destination they can return is of the sink's destination type, and
``unroutable=True`` is refused by a sink that does not accept
:class:`~pyflink_gcp.core.types.UnroutableRecord` (every sink of this package accepts it; a
sink of another package may not).

```python
orders = route_by_field(
    "region",
    {"eu": TopicDestination.of("p", "orders-eu"), "us": TopicDestination.of("p", "orders-us")},
    fallback=TopicDestination.of("p", "orders-other"),
)
daily = route_by_template(
    "orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables("p", "shop", sanitize=True)
)
```
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination, UnroutableRecord, WriterContext
from pyflink_gcp.routing import names
from pyflink_gcp.routing._helpers import MISSING
from pyflink_gcp.routing.fields import UNPARSEABLE, FieldPath
from pyflink_gcp.routing.templates import Template, TemplateValueError


def _payload(record: Any) -> bytes:
    """A dead-letter payload for a record: its bytes, or its JSON (``str`` for the rest)."""
    if isinstance(record, bytes):
        return record
    if isinstance(record, str):
        return record.encode("utf-8")
    try:
        return json.dumps(record, default=str, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        return repr(record).encode("utf-8")


class _Routing:
    """What both resolvers share: the fallback, the unroutable switch, the build-time check."""

    def __init__(
        self,
        fallback: Destination | None,
        unroutable: bool,
        what: str,
        required: bool = True,
        payload: Callable[[Any], bytes] | None = None,
    ) -> None:
        if (
            fallback is not None
            and unroutable
            or (required and fallback is None and not unroutable)
        ):
            raise ConfigurationError(
                f"{what}: give exactly one of fallback=<destination> (records that cannot be "
                "routed go there) and unroutable=True (they go to the failure handler)"
            )
        if fallback is not None and not isinstance(fallback, Destination):
            raise ConfigurationError(f"{what}: fallback must be a destination, got {fallback!r}")
        self.fallback = fallback
        self.unroutable = bool(unroutable)
        #: The dead-letter payload of an unroutable record.
        self.payload = payload if payload is not None else _payload

    def _destinations(self) -> list[Any]:
        return [self.fallback] if self.fallback is not None else []

    def check_sink(self, sink_name: str, destination_type: type, accepts_unroutable: bool) -> None:
        """Called by the sink's ``build()``: every destination fits the sink."""
        for destination in self._destinations():
            if not isinstance(destination, destination_type):
                raise ConfigurationError(
                    f"sink '{sink_name}': resolver {self!r} can return {destination!r}, which is "
                    f"not a {destination_type.__name__}"
                )
        if self.unroutable and not accepts_unroutable:
            raise ConfigurationError(
                f"sink '{sink_name}': resolver {self!r} routes what it cannot route to the "
                "failure handler (unroutable=True), which this sink does not accept; give it a "
                "fallback destination instead"
            )

    def _cannot_route(self, record: Any, reason: str) -> Any:
        if self.fallback is not None:
            return self.fallback
        if self.unroutable:
            return UnroutableRecord.of(self.payload(record), reason)
        raise ValueError(reason)  # the sink fails the job, naming the resolver and the record


class FieldRouter(_Routing):
    """Routes each record by the value of one field. Build it with :func:`route_by_field`."""

    def __init__(
        self,
        path: str,
        routes: Mapping[Any, Destination] | Callable[[Any], Destination | None],
        fallback: Destination | None = None,
        unroutable: bool = False,
    ) -> None:
        super().__init__(fallback, unroutable, f"route_by_field({path!r})")
        self.path = FieldPath(path)
        if isinstance(routes, Mapping):
            self._table: dict[Any, Destination] | None = dict(routes)
            self._function: Callable[[Any], Destination | None] | None = None
            for value, destination in self._table.items():
                if not isinstance(destination, Destination):
                    raise ConfigurationError(
                        f"route_by_field({path!r}): the route of {value!r} must be a "
                        f"destination, got {destination!r}"
                    )
        elif callable(routes):
            self._table = None
            self._function = routes
        else:
            raise ConfigurationError(
                f"route_by_field({path!r}): routes must be a mapping of values to destinations "
                f"or a function of the value, got {routes!r}"
            )

        self.resolve = self._fast_path()

    def _destinations(self) -> list[Any]:
        return [*(self._table or {}).values(), *super()._destinations()]

    def _fast_path(self) -> Callable[[Any, Any], Any]:
        """The resolver the sink calls, its hot path bound to locals when it is made.

        For a mapping of routes and a one-segment path, a dict record costs what the
        hand-written ``routes.get(record.get(key), fallback)`` costs: ``dict.get`` called
        unbound checks in C that the record is a dict (raising TypeError if not), so no type
        check runs per record. The first record that is not a dict switches the resolver to
        the general reader (a JSON payload, a Row, an object) until a dict comes again, so a
        stream of one kind pays no exception per record. A dict subclass is read as a dict.
        A missing key reads as None there, so a router with a route for None (which a missing
        field must not take) goes the general way.
        """
        general = self._resolve
        table = self._table
        if table is None or len(self.path.segments) != 1 or None in table:
            return general
        key = self.path.segments[0]
        route = table.get
        dict_get = dict.get
        fallback = self.fallback
        dicts = True  # whether the last record was a dict

        if fallback is not None:
            read = self.path.get

            def resolve_or_fall_back(record: Any, context: Any) -> Any:
                # Missing, unmatched, unhashable or unparseable: the same way out.
                nonlocal dicts
                if dicts:
                    try:
                        return route(dict_get(record, key), fallback)
                    except TypeError:  # not a dict, or an unhashable value
                        if isinstance(record, dict):
                            return fallback
                        dicts = False
                elif type(record) is dict:
                    dicts = True
                    return resolve_or_fall_back(record, context)
                try:
                    return route(read(record), fallback)
                except TypeError:
                    return fallback

            return resolve_or_fall_back

        def resolve(record: Any, context: Any) -> Any:
            nonlocal dicts
            if dicts:
                try:
                    found = route(dict_get(record, key))
                except TypeError:  # not a dict, or an unhashable value
                    if not isinstance(record, dict):
                        dicts = False
                else:
                    if found is not None:
                        return found
            elif type(record) is dict:
                dicts = True
                return resolve(record, context)
            return general(record, context)

        return resolve

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("resolve", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.resolve = self._fast_path()

    def __call__(self, record: Any, context: WriterContext) -> Any:
        return self.resolve(record, context)

    def _resolve(self, record: Any, context: WriterContext) -> Any:
        value = self.path.get(record)
        if value is MISSING:
            return self._cannot_route(record, f"no field {self.path.path!r}")
        if value is UNPARSEABLE:
            return self._cannot_route(record, "not a JSON object")
        table = self._table
        if table is not None:
            try:
                found = table.get(value)
            except TypeError:  # an unhashable value (a list, a dict): matches no route
                found = None
        else:
            assert self._function is not None
            found = self._function(value)
        if found is None:
            return self._cannot_route(record, f"no route for {self.path.path}={short_repr(value)}")
        return found

    def __repr__(self) -> str:
        routes = (
            f"{len(self._table)} routes"
            if self._table is not None
            else describe_callable(self._function)
        )
        end = f"fallback={self.fallback}" if self.fallback is not None else "unroutable"
        return f"route_by_field({self.path.path!r}, {routes}, {end})"


def route_by_field(
    path: str,
    routes: Mapping[Any, Destination] | Callable[[Any], Destination | None],
    *,
    fallback: Destination | None = None,
    unroutable: bool = False,
) -> FieldRouter:
    """A resolver that routes by the value at ``path`` (see :class:`FieldPath`).

    Args:
        path: The routing field: ``region``, ``customer.region``; in a JSON payload (a ``str``
            or ``bytes`` record) the same path, only that field read.
        routes: Values to destinations, or a function of the value returning a destination or
            None (no route).
        fallback: Where records go whose field is missing, whose value has no route, or whose
            payload is not JSON.
        unroutable: Send those records to the failure handler instead
            (:class:`~pyflink_gcp.core.types.UnroutableRecord`, dead-lettered with
            ``dlq-destination=unresolved``).
    """
    return FieldRouter(path, routes, fallback, unroutable)


class DestinationNames:
    """Names to destinations of one service, and that service's naming rule: the rule its
    destination type validates with, so a name the rule accepts is one the type accepts.

    Args:
        make: The destination of a name.
        rule: The service's naming rule; a template routing here checks every name by it.
        label: What ``repr`` says.
        sanitize: Whether a template routing here sanitizes its values by ``rule``
            (:class:`~pyflink_gcp.routing.templates.Template`'s ``sanitize``).
    """

    def __init__(
        self,
        make: Callable[[str], Destination],
        rule: NameRule | None,
        label: str,
        sanitize: bool = False,
    ):
        if sanitize and rule is None:
            raise ConfigurationError(f"{label}: sanitize=True needs the service's naming rule")
        self.make = make
        self.rule = rule
        self.label = label
        self.sanitize = bool(sanitize)

    def __call__(self, name: str) -> Destination:
        return self.make(name)

    def __repr__(self) -> str:
        return f"{self.label}, sanitized" if self.sanitize else self.label


def bigquery_tables(project: str, dataset: str, *, sanitize: bool = False) -> DestinationNames:
    """Table names in ``project.dataset``, checked by BigQuery's table id rule (and with
    ``sanitize=True``, each template value sanitized by it: see :func:`route_by_template`)."""
    from pyflink_gcp.bigquery.destinations import TableDestination

    return DestinationNames(
        lambda name: TableDestination.of(project, dataset, name),
        names.bigquery_table_id,
        f"tables of {project}.{dataset}",
        sanitize,
    )


def pubsub_topics(project: str, *, sanitize: bool = False) -> DestinationNames:
    """Topic ids in ``project``, checked (``sanitize=True``: and sanitized) by Pub/Sub's topic
    id rule."""
    from pyflink_gcp.pubsub.destinations import TopicDestination

    return DestinationNames(
        lambda name: TopicDestination.of(project, name),
        names.pubsub_topic_id,
        f"topics of {project}",
        sanitize,
    )


def cloudtasks_queues(project: str, location: str, *, sanitize: bool = False) -> DestinationNames:
    """Queue ids in ``project``/``location``, checked (``sanitize=True``: and sanitized) by
    Cloud Tasks' queue id rule."""
    from pyflink_gcp.cloudtasks.destinations import QueueDestination

    return DestinationNames(
        lambda name: QueueDestination.of(project, location, name),
        names.cloudtasks_queue_id,
        f"queues of {project}/{location}",
        sanitize,
    )


def bigtable_tables(project: str, instance: str, *, sanitize: bool = False) -> DestinationNames:
    """Table ids in a Bigtable instance, checked (``sanitize=True``: and sanitized) by
    Bigtable's table id rule."""
    from pyflink_gcp.bigtable.destinations import TableDestination

    return DestinationNames(
        lambda name: TableDestination.of(project, instance, name),
        names.bigtable_table_id,
        f"tables of {project}/{instance}",
        sanitize,
    )


class TemplateRouter(_Routing):
    """Routes each record to the destination a name template renders. Build it with
    :func:`route_by_template`."""

    def __init__(
        self,
        template: str | Template,
        to: DestinationNames | Callable[[str], Destination],
        fallback: Destination | None,
        unroutable: bool,
        fields: tuple[str, ...] | None,
        payload: Callable[[Any], bytes] | None = None,
    ) -> None:
        text = template.text if isinstance(template, Template) else template
        super().__init__(
            fallback, unroutable, f"route_by_template({text!r})", required=False, payload=payload
        )
        if not callable(to):
            raise ConfigurationError(
                f"route_by_template({text!r}): 'to' turns a name into a destination, such as "
                f"bigquery_tables(project, dataset); got {to!r}"
            )
        rule = to.rule if isinstance(to, DestinationNames) else None
        sanitize = isinstance(to, DestinationNames) and to.sanitize
        if isinstance(template, Template) and (
            rule is None or (template.rule == rule and template.sanitizes >= sanitize)
        ):
            self.template = template
        elif (
            isinstance(template, Template)
            and template.sanitizes
            and template.sanitizer is not template.rule
        ):
            # A plain function sanitizes: it stays, and the service's rule checks the name.
            self.template = Template(text, rule, sanitizer=template.sanitizer)
        else:
            sanitize = sanitize or (isinstance(template, Template) and template.sanitizes)
            self.template = Template(text, rule, sanitize=sanitize)
        self.to = to
        # The function itself, a call less for every name built.
        self._make = to.make if isinstance(to, DestinationNames) else to
        self.fields = fields
        if fields is not None:
            self.template.check_fields(fields, f"route_by_template({text!r})")

    def resolve(self, record: Any, context: WriterContext) -> Any:
        try:
            name = self.template.render(record, context, checked=False)
            try:
                # A service's of() keeps the destinations it built (core.types), and checks a
                # new name by the template's rule: one lookup per record.
                return self._make(name)
            except ValueError:
                # The reason, naming the template, the value and the record; a function of
                # the name without a rule fails the job with its own error.
                self.template.check(name, record, context)
                raise
        except TemplateValueError as exc:
            return self._cannot_route(record, str(exc))

    __call__ = resolve

    def __repr__(self) -> str:
        return f"route_by_template({self.template.text!r}, {self.to!r})"


def route_by_template(
    template: str | Template,
    to: DestinationNames | Callable[[str], Destination],
    *,
    fallback: Destination | None = None,
    unroutable: bool = False,
    fields: tuple[str, ...] | list[str] | None = None,
    payload: Callable[[Any], bytes] | None = None,
) -> TemplateRouter:
    """A resolver that routes each record to the destination named by ``template``.

    Args:
        template: The name template (``docs/templates.md``), e.g.
            ``"orders_{tenant}_{event_time:%Y%m%d}"``.
        to: Names to destinations: :func:`bigquery_tables`, :func:`pubsub_topics`,
            :func:`cloudtasks_queues`, :func:`bigtable_tables` (each checks every name by its
            service's naming rule; with ``sanitize=True`` it also sanitizes each rendered
            value by it, refusing a value that would take another value's name), or any
            function of the name.
        fallback: Where a record goes whose name cannot be rendered (a missing field, a value
            that makes no valid name, a sanitized value that collides with another).
        unroutable: Send those records to the failure handler instead
            (:class:`~pyflink_gcp.core.types.UnroutableRecord`, dead-lettered with
            ``dlq-destination=unresolved``). With neither, such a record fails the job with an
            error naming it.
        fields: The record's field names, if known: an unknown placeholder is then an error
            now rather than a fallback per record.
        payload: The dead-letter bytes of an unroutable record (default: its bytes, or its
            JSON); the SQL connectors give the row's JSON in their value forms.
    """
    return TemplateRouter(
        template,
        to,
        fallback,
        unroutable,
        tuple(fields) if fields is not None else None,
        payload,
    )
