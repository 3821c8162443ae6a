"""gcp-cloudtasks's adapter: the URL template (values percent-encoded), the body formats,
headers and task ids from columns, and rows whose templates render nothing unroutable."""

from __future__ import annotations

import json

import pytest

from pyflink_gcp.cloudtasks import QueueDestination
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.table.cloudtasks import build_sink
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, TableInfo


def t(root: str, **more) -> dict:
    return {"root": root, "nullable": True, "sql": root, **more}


TABLE = TableInfo(
    "hooks",
    (
        Column("id", t("BIGINT")),
        Column("tenant", t("VARCHAR")),
        Column("body", t("VARBINARY")),
        Column("meta", t("MAP", key=t("VARCHAR"), value=t("VARCHAR"))),
    ),
)
RECORD = {"id": 7, "tenant": "a/b c", "body": b"raw!", "meta": {"X-Trace": "t1"}}


def _config(**options: str):
    raw = {
        "project": "p",
        "location": "us-central1",
        "queue": "q-{tenant}",
        "url": "http://hooks.example/{tenant}/orders?id={id}",
        **options,
    }
    return build_sink(parse("gcp-cloudtasks", raw, TABLE.names), TABLE)._sink_config()


def test_json_body_url_template_and_queue_template():
    config = _config(**{"task-id.column": "id", "name.sanitize": "true"})
    assert config.resolver.resolve(RECORD, None) == QueueDestination.of(
        "p", "us-central1", "q-a-b-c"
    )
    task = config.serializer.serialize(RECORD, None)
    http = task.http_request
    assert http.url == "http://hooks.example/a%2Fb%20c/orders?id=7"
    assert json.loads(http.body) == {
        "id": 7,
        "tenant": "a/b c",
        "body": "cmF3IQ==",
        "meta": {"X-Trace": "t1"},
    }
    assert http.headers["Content-Type"] == "application/json"
    assert task.name == "7"


def test_raw_body_headers_from_columns_and_a_method():
    config = _config(
        **{
            "body.format": "raw",
            "body.column": "body",
            "content-type": "application/octet-stream",
            "headers.columns": "tenant",
            "headers.map-column": "meta",
            "http-method": "PUT",
        }
    )
    http = config.serializer.serialize(RECORD, None).http_request
    assert http.body == b"raw!"
    assert dict(http.headers) == {
        "Content-Type": "application/octet-stream",
        "tenant": "a/b c",
        "X-Trace": "t1",
    }
    assert http.http_method == 4  # PUT


def test_rows_whose_queue_or_url_renders_nothing_are_unroutable():
    resolver = _config(url="http://h/{id}").resolver
    assert isinstance(resolver.resolve({**RECORD, "id": None}, None), UnroutableRecord)
    assert isinstance(resolver.resolve({**RECORD, "tenant": None}, None), UnroutableRecord)


def test_a_url_must_be_http():
    with pytest.raises(ConfigurationError, match="must start with http:// or https://"):
        _config(url="hooks.example/{id}")
