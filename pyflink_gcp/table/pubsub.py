"""``'connector' = 'gcp-pubsub'``: a table's rows published by the Pub/Sub DataStream sink.

Messages (``payload.format``):

- ``json`` (the default): the row as one JSON object keyed by column name, UTF-8. Values keep
  their JSON form where they have one (numbers, booleans, strings, null, arrays; ROW and MAP as
  objects); DECIMAL is a string (``"12.50"``, exact, as BigQuery's and Debezium's JSON write
  it); DATE and TIME are ISO 8601 (``"2024-03-01"``, ``"12:30:00.123"``); TIMESTAMP is ISO 8601
  without zone (``"2024-03-01T12:30:00.123456"``) and TIMESTAMP_LTZ in UTC with ``Z``; BYTES are
  base64; non-finite floats are ``NaN`` / ``Infinity`` tokens (as Python's and Jackson's lenient
  JSON).
- ``raw``: the bytes of ``payload.column`` (BYTES as they are, STRING as UTF-8); a row whose
  payload column is NULL is skipped (counted in ``recordsSkipped``).

Attributes come from ``attributes.columns`` (each named after its column, the value as text;
NULL leaves it out) and from the entries of ``attributes.map-column`` (a MAP<STRING, STRING>).
``ordering-key.column`` sets each message's ordering key and turns message ordering on.
``attributes.event-time`` and ``attributes.record-id`` name the provenance attributes of
:meth:`~pyflink_gcp.pubsub.PubSubSerializationSchema.with_event_time_attribute` (the row's
rowtime, epoch milliseconds) and
:meth:`~pyflink_gcp.pubsub.PubSubSerializationSchema.with_record_id_attribute` (a digest of
the message and its topic, stable across replays).

A row whose ``topic`` template renders no valid topic id (a NULL column, say) is unroutable: it
goes to the failure handler as its JSON.
"""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.pubsub import PubSubPublisherOptions, PubSubSerializationSchema, PubSubSink
from pyflink_gcp.routing import names, pubsub_topics, route_by_template
from pyflink_gcp.table.adapter import configure, destination_template, mapped
from pyflink_gcp.table.rows import TableInfo

IDENTIFIER = "gcp-pubsub"


def _json_value(value: Any) -> Any:
    """The JSON form of the values ``json.dumps`` has none for."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} has no JSON form")


def row_json(record: dict[str, Any]) -> bytes:
    """The row as a JSON object (see the module docstring for the value forms)."""
    return json.dumps(
        record, default=_json_value, ensure_ascii=False, separators=(",", ":"), allow_nan=True
    ).encode("utf-8")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    json_form = _json_value(value) if not isinstance(value, int | float) else value
    return str(json_form)


def value_text(value: Any) -> str:
    """Any column value as text: scalars as :func:`_text` writes them, ARRAY/ROW/MAP as JSON.

    Shared with the connectors that put values into text fields (Bigtable cells, HTTP
    headers), so a value has one text form everywhere.
    """
    if isinstance(value, list | dict):
        return json.dumps(
            value, default=_json_value, ensure_ascii=False, separators=(",", ":"), allow_nan=True
        )
    return _text(value)


class JsonPayload:
    """``payload.format = json``: the row as a JSON object."""

    def __call__(self, record: dict[str, Any], context: Any) -> bytes:
        return row_json(record)


class ColumnPayload:
    """``payload.format = raw``: one column's bytes (a STRING column as UTF-8)."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, record: dict[str, Any], context: Any) -> bytes | str | None:
        value: bytes | str | None = record[self.column]
        return value


class ColumnText:
    """One column's value as text (None when NULL): the ordering key."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, record: dict[str, Any], context: Any) -> str | None:
        value = record[self.column]
        return None if value is None else _text(value)


class ColumnAttributes:
    """Attributes from columns (named after them) and from a MAP<STRING, STRING> column."""

    def __init__(self, columns: tuple[str, ...], map_column: str | None) -> None:
        self.columns = columns
        self.map_column = map_column

    def __call__(self, record: dict[str, Any], context: Any) -> dict[str, str] | None:
        out: dict[str, str] = {}
        if self.map_column is not None:
            entries = record[self.map_column] or {}
            out.update({str(k): _text(v) for k, v in entries.items() if v is not None})
        for column in self.columns:
            value = record[column]
            if value is not None:
                out[column] = _text(value)
        return out or None


def build_sink(values: dict[str, Any], table: TableInfo) -> DynamicSink:
    """The Pub/Sub sink of a ``gcp-pubsub`` table."""
    builder = PubSubSink.builder()
    configure(builder, IDENTIFIER, values, table)
    template = destination_template(values, "topic", table, names.pubsub_topic_id)
    builder.set_destination_resolver(
        route_by_template(
            template, pubsub_topics(values["project"]), unroutable=True, payload=row_json
        )
    )
    if values["payload.format"] == "raw":
        payload: Any = ColumnPayload(values["payload.column"])
    else:
        payload = JsonPayload()
    schema = PubSubSerializationSchema.payload(payload)
    ordering = values["ordering-key.column"]
    if ordering is not None:
        schema = schema.with_ordering_key(ColumnText(ordering))
    attribute_columns = values["attributes.columns"] or ()
    if attribute_columns or values["attributes.map-column"] is not None:
        schema = schema.with_attributes(
            ColumnAttributes(attribute_columns, values["attributes.map-column"])
        )
    if values["attributes.event-time"] is not None:
        schema = schema.with_event_time_attribute(values["attributes.event-time"])
    if values["attributes.record-id"] is not None:
        schema = schema.with_record_id_attribute(values["attributes.record-id"])
    builder.set_serializer(schema)
    publisher = mapped(IDENTIFIER, values, "publisher")
    publisher["enable_message_ordering"] = ordering is not None
    builder.set_publisher_options(PubSubPublisherOptions(**publisher))
    if values["endpoint"] is not None:
        builder.set_endpoint(values["endpoint"])
    return builder.build()
