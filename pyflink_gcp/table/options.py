"""The options of the SQL connectors: one list, read by the Python adapter and the Java factories.

Every connector (``gcp-pubsub``, ``gcp-bigquery``, ...) declares its option keys here, once: the
key (Flink's connector convention: lower-case, dash-separated, ``sink.`` for the writer's
settings), whether it is required, its kind, its default (the DataStream sink's default, in the
DDL's string form) and the DataStream option it maps to. The bridge build turns this list into a
resource of the jar (``META-INF/pyflink-gcp/table-options.json``, :func:`resource`), from which
the Java factories declare their ``ConfigOption`` s and check values at planning time; the
Python adapter parses the same list on the worker (:func:`parse`). So the two sides cannot drift,
and a mistake in a DDL fails the ``INSERT`` when it is planned, with one message, instead of a
worker restarting forever.

This module imports nothing but the standard library: the bridge build loads it by its file
path, also where the package's dependencies are not installed (the wheel build).

Kinds and their DDL syntax (parsed the same way in Java):

- ``string``: any text; ``int``: a decimal integer within ``minimum``/``maximum``;
  ``bool``: ``true`` or ``false``; ``enum``: one of ``choices``;
- ``duration``: an integer and a unit, ``500ms``, ``10s``, ``5min``, ``2h``, ``1d`` (at least
  ``minimum`` milliseconds);
- ``column``: the name of a column of the table; ``columns``: a comma-separated list of them;
- ``template``: a destination name with placeholders, ``orders_{tenant}_{event_time:%Y%m%d}``
  (:mod:`pyflink_gcp.routing.templates`); the first segment of a placeholder's path must be a
  column, or ``event_time`` / ``processing_time``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

#: Option kinds (see the module docstring).
KINDS = ("string", "int", "bool", "duration", "enum", "column", "columns", "template")
#: Placeholder roots a template may use besides the table's columns.
TIME_ROOTS = ("event_time", "processing_time")
#: Where the writer operator's function comes from: ``module:name``, a top-level name (the
#: payload pickle's GLOBAL takes no dotted attribute).
WRITER_FACTORY = "pyflink_gcp.table:create_writer"
#: The resource the Java factories read, and the SPI file that lists them.
RESOURCE = "META-INF/pyflink-gcp/table-options.json"
SERVICES = "META-INF/services/org.apache.flink.table.factories.Factory"

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


class OptionError(ValueError):
    """A DDL option that is unknown, missing or of a bad value (the message is the Java one)."""


@dataclass(frozen=True)
class TableOption:
    """One option key of a connector.

    Attributes:
        key: The DDL key.
        kind: One of :data:`KINDS`.
        description: What it does, for the docs.
        required: Whether a DDL must set it.
        default: The value when unset, in DDL form (None: unset means "not configured").
        choices: An ``enum``'s values.
        maps_to: The DataStream option it sets: a field of the service's writer options
            (``writer.max_buffered_records``), of another options value
            (``publisher.max_messages``), or a builder setter (``set_endpoint``).
        minimum: Smallest ``int`` value, or smallest ``duration`` in milliseconds.
        maximum: Largest ``int`` value.
        required_when: ``(key, value)``: required when that option has that value.
        names: A template's sanitizer in :mod:`pyflink_gcp.routing.names` (``pubsub_topic_id``).
    """

    key: str
    kind: str
    description: str
    required: bool = False
    default: str | None = None
    choices: tuple[str, ...] = ()
    maps_to: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    required_when: tuple[str, str] | None = None
    names: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The option as the Java side reads it."""
        return {
            "key": self.key,
            "kind": self.kind,
            "required": self.required,
            "default": self.default,
            "choices": list(self.choices),
            "maps_to": self.maps_to,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "required_when": list(self.required_when) if self.required_when else None,
        }


@dataclass(frozen=True)
class Connector:
    """A SQL connector: its identifier, its Java factory, its adapter and its options.

    Attributes:
        identifier: The DDL's ``'connector' = ...`` value.
        factory_class: The Java ``DynamicTableSinkFactory`` (a subclass of the bridge's
            ``GcpTableSinkFactory`` naming the identifier).
        adapter: ``module:function`` building the DataStream sink from the parsed options
            (see :mod:`pyflink_gcp.table.adapter`).
        options: Its option keys.
    """

    identifier: str
    factory_class: str
    adapter: str
    options: tuple[TableOption, ...]

    def option(self, key: str) -> TableOption:
        for option in self.options:
            if option.key == key:
                return option
        raise KeyError(key)


def _writer_options(*, creates: bool, create_default: str) -> tuple[TableOption, ...]:
    """The options every connector shares: parallelism, buffering, lifetimes, failures."""
    shared = (
        TableOption(
            "sink.parallelism",
            "int",
            "Parallelism of the writer (default: the input's).",
            minimum=1,
        ),
        TableOption(
            "sink.buffer-flush.max-rows",
            "int",
            "Rows a subtask buffers between two bundle ends.",
            default="20000",
            maps_to="writer.max_buffered_records",
            minimum=1,
        ),
        TableOption(
            "sink.buffer-flush.interval",
            "duration",
            "Longest time a row waits before it is sent.",
            default="1s",
            maps_to="writer.max_buffer_time",
            minimum=1,
        ),
        TableOption(
            "sink.retry-deadline",
            "duration",
            "How long transient errors of one call are retried before the job fails.",
            default="2min",
            maps_to="writer.retry_deadline",
            minimum=0,
        ),
        TableOption(
            "sink.max-in-flight-requests",
            "int",
            "Write calls sent before the first is answered.",
            default="4",
            maps_to="writer.max_in_flight_requests",
            minimum=1,
        ),
        TableOption(
            "sink.per-destination-metrics",
            "bool",
            "Register Flink counters per destination.",
            default="false",
            maps_to="writer.per_destination_metrics",
        ),
        TableOption(
            "sink.idle-timeout",
            "duration",
            "Close a destination's writer unused this long (0ms: at every flush).",
            default="15min",
            maps_to="writer.idle_timeout",
            minimum=0,
        ),
        TableOption(
            "sink.max-active-destinations",
            "int",
            "Cap on live destination writers per subtask (default: no cap).",
            maps_to="writer.max_active_destinations",
            minimum=1,
        ),
        TableOption(
            "failure-handler",
            "enum",
            "What happens to rows the service rejects for their content.",
            default="fail",
            choices=("fail", "drop", "dead-letter"),
            maps_to="set_failure_handler",
        ),
        TableOption(
            "dead-letter.topic",
            "string",
            "The dead-letter topic, projects/<project>/topics/<topic>.",
            required_when=("failure-handler", "dead-letter"),
            maps_to="PubSubDeadLetterQueue.of",
        ),
    )
    if not creates:
        return shared
    return (
        *shared,
        TableOption(
            "create-disposition",
            "enum",
            "Whether the sink creates destinations its template names.",
            default=create_default,
            choices=("create-if-needed", "create-never"),
            maps_to="set_create_disposition",
        ),
        TableOption(
            "sink.max-created-destinations",
            "int",
            "How many destinations one subtask may create; one more fails the job.",
            default="100",
            maps_to="writer.max_created_destinations",
            minimum=0,
        ),
    )


PUBSUB = Connector(
    identifier="gcp-pubsub",
    factory_class="dev.pyflinkgcp.bridge.table.PubSubTableSinkFactory",
    adapter="pyflink_gcp.table.pubsub:build_sink",
    options=(
        TableOption("project", "string", "The topics' project.", required=True),
        TableOption(
            "topic",
            "template",
            "The topic id, a template over the row.",
            required=True,
            names="pubsub_topic_id",
            maps_to="set_destination_resolver",
        ),
        TableOption("endpoint", "string", "host:port of Pub/Sub.", maps_to="set_endpoint"),
        TableOption(
            "payload.format",
            "enum",
            "json: the row as a JSON object; raw: one column's bytes.",
            default="json",
            choices=("json", "raw"),
            maps_to="set_serializer",
        ),
        TableOption(
            "payload.column",
            "column",
            "The column a raw payload is (BYTES or STRING).",
            required_when=("payload.format", "raw"),
        ),
        TableOption(
            "attributes.columns",
            "columns",
            "Columns sent as attributes (named after the column).",
        ),
        TableOption(
            "attributes.map-column",
            "column",
            "A MAP<STRING, STRING> column whose entries are attributes.",
        ),
        TableOption(
            "ordering-key.column",
            "column",
            "The column that is the ordering key (turns message ordering on).",
            maps_to="with_ordering_key",
        ),
        TableOption(
            "publisher.max-messages",
            "int",
            "Messages per Publish request.",
            default="1000",
            maps_to="publisher.max_messages",
            minimum=1,
            maximum=1000,
        ),
        TableOption(
            "publisher.max-bytes",
            "int",
            "Bytes per Publish request.",
            default="5000000",
            maps_to="publisher.max_bytes",
            minimum=1,
            maximum=10_000_000,
        ),
        TableOption(
            "sink.shutdown-budget",
            "duration",
            "How long closing a publisher may wait for its requests.",
            default="30s",
            maps_to="writer.shutdown_budget",
            minimum=1,
        ),
        *_writer_options(creates=True, create_default="create-never"),
    ),
)

BIGQUERY = Connector(
    identifier="gcp-bigquery",
    factory_class="dev.pyflinkgcp.bridge.table.BigQueryTableSinkFactory",
    adapter="pyflink_gcp.table.bigquery:build_sink",
    options=(
        TableOption("project", "string", "The tables' project.", required=True),
        TableOption("dataset", "string", "The tables' dataset.", required=True),
        TableOption(
            "table",
            "template",
            "The table id, a template over the row.",
            required=True,
            names="bigquery_table_id",
            maps_to="set_destination_resolver",
        ),
        TableOption(
            "write-method",
            "enum",
            "How rows reach BigQuery (the Storage Write API's default stream).",
            default="storage-api-at-least-once",
            choices=("storage-api-at-least-once",),
            maps_to="set_write_method",
        ),
        TableOption(
            "ordering-mode",
            "enum",
            "none, or per-table: one request in flight per table.",
            default="none",
            choices=("none", "per-table"),
            maps_to="set_ordering_mode",
        ),
        TableOption(
            "storage-endpoint",
            "string",
            "host:port of the Storage Write API.",
            maps_to="set_storage_endpoint",
        ),
        TableOption(
            "rest-endpoint",
            "string",
            "Base URL of the BigQuery REST API.",
            maps_to="set_rest_endpoint",
        ),
        *_writer_options(creates=True, create_default="create-if-needed"),
    ),
)

#: Every connector, by identifier.
CONNECTORS: dict[str, Connector] = {c.identifier: c for c in (PUBSUB, BIGQUERY)}


def resource(non_retriable_marker: str) -> dict[str, str]:
    """The files the bridge build puts into the jar: the option list and the SPI file.

    Args:
        non_retriable_marker: The line a Python error a restart cannot fix carries
            (:data:`pyflink_gcp.core.errors.NON_RETRIABLE_MARKER`); the Java sink hands it to
            the marker operator.
    """
    module, name = WRITER_FACTORY.split(":")
    document = {
        "version": 1,
        "writer_module": module,
        "writer_name": name,
        "non_retriable_marker": non_retriable_marker,
        "time_roots": list(TIME_ROOTS),
        "connectors": {
            c.identifier: {
                "factory": c.factory_class,
                "options": [o.as_json() for o in c.options],
            }
            for c in CONNECTORS.values()
        },
    }
    services = "".join(f"{c.factory_class}\n" for c in CONNECTORS.values())
    return {
        RESOURCE: json.dumps(document, indent=1, sort_keys=True) + "\n",
        SERVICES: services,
    }


# -- parsing: the same rules and messages as the Java factories --------------------------------


def _invalid(connector: str, key: str, expected: str, value: str) -> OptionError:
    return OptionError(
        f"Invalid value for option '{key}' of connector '{connector}': expected {expected}, "
        f"got '{value}'."
    )


def parse_duration(text: str) -> timedelta | None:
    """``10s`` as a timedelta; None when ``text`` is no duration of this syntax."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return timedelta(milliseconds=int(match.group(1)) * _UNIT_MS[match.group(2)])


def _parse_value(connector: str, option: TableOption, text: str, columns: Sequence[str]) -> Any:
    key, kind = option.key, option.kind
    if kind in ("string", "template"):
        return text
    if kind == "int":
        low, high = option.minimum, option.maximum
        bound = (
            f" in [{low}, {high}]"
            if low is not None and high is not None
            else (f" >= {low}" if low is not None else "")
        )
        if not re.fullmatch(r"\s*-?\d+\s*", text):
            raise _invalid(connector, key, f"an integer{bound}", text)
        number = int(text)
        if (low is not None and number < low) or (high is not None and number > high):
            raise _invalid(connector, key, f"an integer{bound}", text)
        return number
    if kind == "bool":
        if text.strip().lower() not in ("true", "false"):
            raise _invalid(connector, key, "true or false", text)
        return text.strip().lower() == "true"
    if kind == "duration":
        duration = parse_duration(text)
        low = option.minimum or 0
        if duration is None or duration < timedelta(milliseconds=low):
            least = " of at least 1ms" if low == 1 else ""
            raise _invalid(
                connector, key, f"a duration such as 500ms, 10s, 5min, 1h or 1d{least}", text
            )
        return duration
    if kind == "enum":
        if text not in option.choices:
            raise _invalid(connector, key, "one of " + ", ".join(option.choices), text)
        return text
    if kind in ("column", "columns"):
        names = [n.strip() for n in text.split(",")] if kind == "columns" else [text]
        for name in names:
            if name not in columns:
                raise _invalid(
                    connector, key, "a column of the table (" + ", ".join(columns) + ")", name
                )
        return tuple(names) if kind == "columns" else text
    raise OptionError(f"option '{key}' of connector '{connector}' has an unknown kind {kind!r}")


def parse(identifier: str, raw: Mapping[str, str], columns: Sequence[str]) -> dict[str, Any]:
    """The options of a DDL, typed, with the defaults of the unset ones.

    The Java factory already checked all of this at planning time; the worker checks again so
    that the adapter never runs on options Java did not see (a payload built by hand).

    Args:
        identifier: The connector.
        raw: The DDL's options (``connector`` is ignored).
        columns: The table's column names (for ``column`` options).

    Returns:
        Every option key of the connector: its parsed value, or None when unset without default.

    Raises:
        OptionError: An unknown key, a missing required key, or a bad value.
    """
    connector = CONNECTORS.get(identifier)
    if connector is None:
        raise OptionError(f"unknown connector '{identifier}' (known: {', '.join(CONNECTORS)})")
    known = {o.key: o for o in connector.options}
    unknown = sorted(k for k in raw if k != "connector" and k not in known)
    if unknown:
        raise OptionError(
            f"Unsupported options found for '{identifier}': {', '.join(unknown)}. "
            f"Supported options: {', '.join(sorted(known))}."
        )
    missing = sorted(o.key for o in connector.options if o.required and o.key not in raw)
    if missing:
        raise OptionError(f"Missing required options for '{identifier}': {', '.join(missing)}.")
    values: dict[str, Any] = {}
    for option in connector.options:
        text = raw.get(option.key, option.default)
        values[option.key] = (
            None if text is None else _parse_value(identifier, option, text, columns)
        )
    for option in connector.options:
        if option.required_when and values[option.key] is None:
            other, value = option.required_when
            if values.get(other) == value:
                raise OptionError(
                    f"Option '{option.key}' of connector '{identifier}' is required when "
                    f"'{other}' is '{value}'."
                )
    return values
