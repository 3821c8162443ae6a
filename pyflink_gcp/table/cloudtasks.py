"""``'connector' = 'gcp-cloudtasks'``: one HTTP task per row, created by the Cloud Tasks sink.

Each row becomes a task on the queue the ``queue`` template names (the sink never creates
queues), sent to the URL the ``url`` template renders: placeholder values are percent-encoded
(``https://hooks.example.com/{tenant}/orders?id={id}`` with tenant ``a/b`` calls
``.../a%2Fb/orders?id=7``), the literal text is kept, and it must start with ``http://`` or
``https://``.

The body (``body.format``) is ``json`` (the default): the row as a JSON object keyed by column
name, with ``Content-Type: application/json``, in the value forms of the ``gcp-pubsub``
connector; ``raw``: the bytes of ``body.column`` (BYTES as they are, STRING as UTF-8; NULL sends
no body); or ``none``. ``content-type`` sets the header of a json or raw body. Headers come from
``headers.columns`` (named after the column, the value as text; NULL leaves it out) and the
entries of ``headers.map-column`` (a MAP<STRING, STRING>). ``task-id.column`` names each task
(letters, digits, ``-`` and ``_``): a replayed row then maps to the same task, which the
service does not create twice; without it a replay after a failure can create duplicates.

A row whose queue or URL template renders no value (a NULL column, say) is unroutable: it goes
to the failure handler as its JSON.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import quote

from pyflink_gcp.cloudtasks import CloudTasksSerializationSchema, CloudTasksSink, QueueDestination
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.routing import TemplateRouter, cloudtasks_queues, names, route_by_template
from pyflink_gcp.routing.templates import Template, TemplateValueError
from pyflink_gcp.table.adapter import configure, destination_template
from pyflink_gcp.table.pubsub import (
    ColumnAttributes,
    ColumnPayload,
    ColumnText,
    JsonPayload,
    row_json,
)
from pyflink_gcp.table.rows import TableInfo

IDENTIFIER = "gcp-cloudtasks"

#: Percent-encodes a placeholder's value, ``/`` included (a value is one path segment or query
#: value, never a path of its own).
url_value = partial(quote, safe="")


class UrlTemplate:
    """The URL function of the task schema: the ``url`` template rendered for the row."""

    def __init__(self, template: Template) -> None:
        self.template = template

    def __call__(self, record: dict[str, Any], context: Any) -> str:
        return self.template.render(record, context)


class QueueAndUrl:
    """The resolver: the queue ``route_by_template`` names for the ``queue`` template; also
    unroutable when the URL template renders nothing for the row (the serializer renders the
    URL again).

    Args:
        queues: The ``queue`` template's resolver (unroutable rows to the failure handler).
        url: The ``url`` template, or None when it is constant.
    """

    def __init__(self, queues: TemplateRouter, url: Template | None) -> None:
        self.queues = queues
        self.url = url

    def resolve(self, record: dict[str, Any], context: Any) -> QueueDestination | UnroutableRecord:
        destination: QueueDestination | UnroutableRecord = self.queues.resolve(record, context)
        if self.url is None or type(destination) is UnroutableRecord:
            return destination
        try:
            self.url.render(record, context)
        except TemplateValueError as exc:
            return UnroutableRecord.of(row_json(record), str(exc))
        return destination

    def check_sink(self, sink_name: str, destination_type: type, accepts_unroutable: bool) -> None:
        """The queue resolver's build-time check (``pyflink_gcp.routing``)."""
        self.queues.check_sink(sink_name, destination_type, accepts_unroutable)


def _url_template(values: dict[str, Any], table: TableInfo) -> Template:
    text: str = values["url"]
    if not text.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"sink '{table.sink_name}': option 'url' of connector '{IDENTIFIER}' must start "
            f"with http:// or https://, got '{text}'"
        )
    template = Template(text, sanitizer=url_value)
    template.check_fields(table.names, f"sink '{table.sink_name}' option 'url'")
    return template


def build_sink(values: dict[str, Any], table: TableInfo) -> DynamicSink:
    """The Cloud Tasks sink of a ``gcp-cloudtasks`` table."""
    builder = CloudTasksSink.builder()
    configure(builder, IDENTIFIER, values, table)
    queue = destination_template(values, "queue", table, names.cloudtasks_queue_id)
    url = _url_template(values, table)
    queues = route_by_template(
        queue,
        cloudtasks_queues(values["project"], values["location"]),
        unroutable=True,
        payload=row_json,
    )
    builder.set_destination_resolver(QueueAndUrl(queues, None if url.is_constant else url))
    target: Any = url.render({}) if url.is_constant else UrlTemplate(url)
    schema = CloudTasksSerializationSchema.http_target(target).with_http_method(
        values["http-method"]
    )
    content_type = values["content-type"]
    if values["body.format"] == "json":
        schema = schema.with_body(JsonPayload(), content_type=content_type or "application/json")
    elif values["body.format"] == "raw":
        schema = schema.with_body(ColumnPayload(values["body.column"]), content_type=content_type)
    header_columns = values["headers.columns"] or ()
    if header_columns or values["headers.map-column"] is not None:
        schema = schema.with_headers(ColumnAttributes(header_columns, values["headers.map-column"]))
    if values["task-id.column"] is not None:
        schema = schema.with_task_id(ColumnText(values["task-id.column"]))
    builder.set_serializer(schema)
    if values["endpoint"] is not None:
        builder.set_endpoint(values["endpoint"])
    return builder.build()
