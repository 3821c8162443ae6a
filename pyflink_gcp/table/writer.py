"""The writer function of a SQL connector's operator: built on the worker from the DDL's options.

The Java sink's payload is a pickle that calls :func:`create_writer` with the connector's
identifier, the DDL's options and the table's columns. It parses the options with the same
list the Java factory validated them with, lets the connector's adapter build the service's
DataStream sink with its builder, and returns that sink's writer function: the DataStream
runtime's typed-marker writer, which only turns each ``Row`` into a dict first.
"""

from __future__ import annotations

import importlib
from typing import Any

from pyflink.common.types import RowKind

from pyflink_gcp.core.commit_operator import CommitterProcessFunction
from pyflink_gcp.core.errors import ConfigurationError, NonRetriableSinkError, mark_non_retriable
from pyflink_gcp.core.operators import TypedMarkedWriterProcessFunction, bare_marker_id
from pyflink_gcp.core.runtime import check_carry
from pyflink_gcp.core.sink_writer import SinkConfig
from pyflink_gcp.table.option_model import OptionError
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import DeletedRow, RowConverter, TableInfo


class TableWriterProcessFunction(TypedMarkedWriterProcessFunction):
    """The typed-marker writer of a table sink: each row becomes ``{column: value}`` first.

    Its input is the table's ``Row`` values and the marker operator's markers (elements without
    a value, :func:`~pyflink_gcp.core.operators.bare_marker_id`); markers, flushes, failure
    handling and metrics are the DataStream writer's.
    With ``changelog`` (a table with a primary key, whose sink the planner feeds upserts), a
    ``DELETE`` row becomes a :class:`DeletedRow` and an ``UPDATE_BEFORE`` is dropped: an upsert
    of the key's new row replaces the old one, so the retraction carries nothing to write.
    """

    def __init__(self, config: SinkConfig, convert: RowConverter, changelog: bool = False) -> None:
        super().__init__(config)
        self._convert = convert
        self._changelog = changelog

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        marker = bare_marker_id(value, ctx)
        if marker is None:
            row = value
            if self._changelog:
                kind = row.get_row_kind()
                if kind == RowKind.UPDATE_BEFORE:
                    return None
                if kind == RowKind.DELETE:
                    self._write(DeletedRow(self._convert(row)), ctx)
                    return None
            self._write(self._convert(row), ctx)
            return None
        return self._on_marker(marker)


class UnbuildableWriter:
    """Stands in for a writer that could not be built, and raises its error from ``open()``.

    The payload is unpickled when the worker starts its operator, where an exception restarts
    the job forever under the default restart strategy. Raised from ``open()`` instead (with
    the first bundle), the error is marked non-retriable and the bridge's operator ends the job
    once with it. The Java factory checks the options at planning, so only what it cannot see
    gets here: a column type the service has no form for, a missing client library.
    """

    def __init__(self, error: NonRetriableSinkError) -> None:
        self._error = error

    def open(self, runtime_context: Any) -> None:
        mark_non_retriable(self._error)
        raise self._error

    def process_element(self, value: Any, ctx: Any) -> None:
        return None

    def close(self) -> None:
        return None


def _adapter(identifier: str) -> Any:
    module, name = CONNECTORS[identifier].adapter.split(":")
    return getattr(importlib.import_module(module), name)


def _build(identifier: str, options: dict[str, str], table: TableInfo) -> Any:
    """The DataStream sink the connector's adapter builds from the DDL's options."""
    try:
        values = parse(identifier, options, table.names)
    except OptionError as exc:
        raise ConfigurationError(f"sink '{table.sink_name}': {exc}") from exc
    try:
        return _adapter(identifier)(values, table)
    except ImportError as exc:
        raise ConfigurationError(f"sink '{table.sink_name}': {exc}") from exc


def create_writer(
    identifier: str, options: dict[str, str], schema: str
) -> TableWriterProcessFunction | UnbuildableWriter:
    """The writer function of a ``identifier`` table (called by the Java sink's payload).

    Args:
        identifier: The connector (``gcp-pubsub``...).
        options: The DDL's options, as strings.
        schema: The Java sink's description of the table (:class:`TableInfo`).
    """
    table = TableInfo.from_json(schema)
    try:
        sink = _build(identifier, options, table)
        config = sink._sink_config()
        # The Java factory refused these at planning; a payload built otherwise fails here.
        check_carry(config, "a table with a PRIMARY KEY" if table.primary_key else None)
    except NonRetriableSinkError as exc:
        return UnbuildableWriter(exc)
    return TableWriterProcessFunction(
        config, RowConverter(table.columns), changelog=bool(table.primary_key)
    )


def create_committer(
    identifier: str, options: dict[str, str], schema: str
) -> CommitterProcessFunction | UnbuildableWriter:
    """The committer function of a table whose write method commits after the checkpoint.

    The Java sink puts the bridge's committer operator after the writer when the options name
    such a method (``'write-method' = 'buffered-stream'``); its payload calls this with the
    writer's arguments, so both halves are built from the same sink configuration.
    """
    table = TableInfo.from_json(schema)
    try:
        sink = _build(identifier, options, table)
    except NonRetriableSinkError as exc:
        return UnbuildableWriter(exc)
    return CommitterProcessFunction(sink._sink_config())
