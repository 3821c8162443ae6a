"""From a DDL's options to the DataStream sink builders: what every connector shares.

A connector's adapter (``pyflink_gcp.table.pubsub.build_sink``, ...) is a function
``(values, table) -> DynamicSink``: ``values`` are the parsed options
(:func:`pyflink_gcp.table.options.parse`, every key present), ``table`` the columns the Java
sink describes. It builds the service's DataStream sink with that service's builder, so the
table path runs exactly the DataStream runtime; this module holds the parts every adapter
needs: the writer options (every option whose ``maps_to`` is ``writer.<field>``), the failure
handler, the create disposition and the destination template.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pyflink_gcp.core.builder import CreatingSinkBuilder, SinkBuilder
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.options import CreateDisposition, WriterOptions
from pyflink_gcp.routing.names import NameRule
from pyflink_gcp.routing.templates import Template
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.rows import TableInfo

O = TypeVar("O", bound=WriterOptions)  # noqa: E741 - the options type, as in core.options

_DISPOSITIONS = {
    "create-if-needed": CreateDisposition.CREATE_IF_NEEDED,
    "create-never": CreateDisposition.CREATE_NEVER,
}


def writer_options(identifier: str, values: dict[str, Any], options_type: type[O]) -> O:
    """The service's writer options from every set option that maps to one of their fields."""
    fields: dict[str, Any] = {}
    for option in CONNECTORS[identifier].options:
        target = option.maps_to or ""
        if target.startswith("writer.") and values.get(option.key) is not None:
            fields[target.removeprefix("writer.")] = values[option.key]
    return options_type(**fields)


def mapped(identifier: str, values: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The set options mapping to ``<prefix>.<field>``, by field (``publisher`` options...)."""
    out: dict[str, Any] = {}
    for option in CONNECTORS[identifier].options:
        target = option.maps_to or ""
        if target.startswith(prefix + ".") and values.get(option.key) is not None:
            out[target.removeprefix(prefix + ".")] = values[option.key]
    return out


def failure_handler(values: dict[str, Any]) -> FailureHandler:
    """``failure-handler``: fail (the default), drop, or dead-letter to ``dead-letter.topic``."""
    mode = values["failure-handler"]
    if mode == "drop":
        return FailureHandler.log_and_drop()
    if mode == "dead-letter":
        from pyflink_gcp.pubsub import PubSubDeadLetterQueue, TopicDestination

        topic = TopicDestination.from_resource_name(values["dead-letter.topic"])
        return FailureHandler.send_to_dead_letter_queue(PubSubDeadLetterQueue.of(topic))
    return FailureHandler.fail_job()


def destination_template(
    values: dict[str, Any], key: str, table: TableInfo, sanitizer: NameRule
) -> Template:
    """The template of option ``key``, its placeholders checked against the table's columns."""
    template = Template(values[key], sanitizer=sanitizer)
    template.check_fields(table.names, f"sink '{table.sink_name}' option '{key}'")
    return template


def configure(
    builder: SinkBuilder, identifier: str, values: dict[str, Any], table: TableInfo
) -> None:
    """What every connector sets on its builder: name, writer options, failures, creation."""
    builder.set_sink_name(table.sink_name)
    builder.set_writer_options(writer_options(identifier, values, builder.options_type))
    builder.set_failure_handler(failure_handler(values))
    if isinstance(builder, CreatingSinkBuilder) and values.get("create-disposition"):
        builder.set_create_disposition(_DISPOSITIONS[values["create-disposition"]])
