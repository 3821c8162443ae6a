"""From a DDL's options to the DataStream sink builders: what every connector shares.

A connector's adapter (``pyflink_gcp.table.pubsub.build_sink``, ...) is a function
``(values, table) -> DynamicSink``: ``values`` are the parsed options
(:func:`pyflink_gcp.table.options.parse`, every key present), ``table`` the columns the Java
sink describes. It builds the service's DataStream sink with that service's builder, so the
table path runs exactly the DataStream runtime; this module holds the parts every adapter
needs: the writer options (every option whose ``maps_to`` is ``writer.<field>``), the failure
handler, the create disposition, the field selection (``fields.*``) and the destination template.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pyflink_gcp.core.builder import CreatingSinkBuilder, SinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.core.options import CreateDisposition, WriterOptions
from pyflink_gcp.routing.names import NameRule
from pyflink_gcp.routing.templates import Template
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.rows import Column, TableInfo

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


#: What a row that fails the job tells a SQL user: the option, not the DataStream API.
SQL_FAIL_REMEDY = (
    "('failure-handler' = 'fail', the default). A restart replays this row: fix its cause, or "
    "let the job go on past such rows with 'failure-handler' = 'drop' or 'dead-letter' (with "
    "'dead-letter.topic')"
)


def failure_handler(values: dict[str, Any]) -> FailureHandler:
    """``failure-handler``: fail (the default), drop, or dead-letter to ``dead-letter.topic``."""
    mode = values["failure-handler"]
    if mode == "drop":
        return FailureHandler.log_and_drop()
    if mode == "dead-letter":
        from pyflink_gcp.pubsub import PubSubDeadLetterQueue, TopicDestination

        topic = TopicDestination.from_resource_name(values["dead-letter.topic"])
        return FailureHandler.send_to_dead_letter_queue(PubSubDeadLetterQueue.of(topic))
    return FailureHandler.fail_job(remedy=SQL_FAIL_REMEDY)


def destination_template(
    values: dict[str, Any], key: str, table: TableInfo, sanitizer: NameRule
) -> Template:
    """The template of option ``key``, its placeholders checked against the table's columns;
    every name is checked by ``sanitizer`` (a rule), which sanitizes values with
    ``name.sanitize``."""
    template = Template(values[key], sanitizer, sanitize=bool(values.get("name.sanitize")))
    template.check_fields(table.names, f"sink '{table.sink_name}' option '{key}'")
    return template


_SELECTION_KEYS = ("fields.drop", "fields.keep", "fields.only")


def field_selection(
    identifier: str, values: dict[str, Any], table: TableInfo
) -> FieldSelection | None:
    """The ``fields.*`` options as a :class:`~pyflink_gcp.core.fields.FieldSelection` (None:
    every column is written).

    Raises:
        ConfigurationError: More than one of them is set, ``fields.only`` names a column that
            is no ROW or is set on a table with a primary key, or the selection leaves out a
            primary key column (a changelog row needs its key).
    """
    given = [k for k in _SELECTION_KEYS if values.get(k) is not None]
    if not given:
        return None
    where = f"sink '{table.sink_name}': option"
    if len(given) > 1:
        raise ConfigurationError(
            f"{where}s {' and '.join(repr(k) for k in given)} of connector '{identifier}' "
            "exclude each other: at most one of fields.drop, fields.keep and fields.only "
            "selects the written columns"
        )
    key = given[0]
    if key == "fields.only":
        column = table.column(values[key])
        if column.root != "ROW":
            raise ConfigurationError(
                f"{where} 'fields.only' of connector '{identifier}' names column {column.name} "
                f"of type {column.type['sql']}; it must be a ROW column, whose fields are "
                "written as the row"
            )
        if table.primary_key:
            raise ConfigurationError(
                f"{where} 'fields.only' of connector '{identifier}' cannot apply to a table "
                "with a PRIMARY KEY: its changelog rows are written by their key columns"
            )
        return FieldSelection.only(column.name)
    kind = key.removeprefix("fields.")
    selection = FieldSelection.of(**{kind: values[key]})
    assert selection is not None
    kept = selection.columns(table.names)
    lost = [k for k in table.primary_key if k not in kept]
    if lost:
        raise ConfigurationError(
            f"{where} '{key}' of connector '{identifier}' leaves out the primary key column(s) "
            f"{', '.join(lost)}: a changelog row is written by its key, so the key is written"
        )
    return selection


def written_columns(selection: FieldSelection | None, table: TableInfo) -> tuple[Column, ...]:
    """The columns a row is written with under ``selection``: the table's, those ``drop`` or
    ``keep`` leave, or the fields of ``only``'s ROW column."""
    if selection is None:
        return table.columns
    if selection.kind == "only":
        row = table.column(selection.fields[0])
        return tuple(Column(f["name"], f["type"]) for f in row.type["fields"])
    kept = set(selection.columns(table.names))
    return tuple(c for c in table.columns if c.name in kept)


def configure(
    builder: SinkBuilder, identifier: str, values: dict[str, Any], table: TableInfo
) -> FieldSelection | None:
    """What every connector sets on its builder: name, writer options, failures, creation and
    the field selection, which it returns (None: every column is written)."""
    builder.set_sink_name(table.sink_name)
    builder.set_writer_options(writer_options(identifier, values, builder.options_type))
    builder.set_failure_handler(failure_handler(values))
    if isinstance(builder, CreatingSinkBuilder) and values.get("create-disposition"):
        builder.set_create_disposition(_DISPOSITIONS[values["create-disposition"]])
    selection = field_selection(identifier, values, table)
    if selection is not None:
        builder.set_field_selection(selection)
    return selection
