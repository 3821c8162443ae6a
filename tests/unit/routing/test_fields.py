"""Field paths: dicts, Rows, objects, and JSON payloads read without parsing them whole."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.routing._helpers import MISSING
from pyflink_gcp.routing.fields import UNPARSEABLE, FieldPath


def test_a_path_reads_dicts_rows_and_attributes() -> None:
    from pyflink.common.types import Row

    path = FieldPath("customer.region")
    assert path.get({"customer": {"region": "eu"}}) == "eu"
    assert path.get(SimpleNamespace(customer=SimpleNamespace(region="us"))) == "us"
    assert path.get(Row(customer=Row(region="pl"))) == "pl"
    assert path.get({"customer": None}) is MISSING
    assert path.get({"other": 1}) is MISSING


@pytest.mark.parametrize("bad", ["", ".", "a..b", "$.", 3])
def test_empty_segments_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        FieldPath(bad)  # type: ignore[arg-type]


def test_json_payloads_route_by_their_field_in_str_and_bytes() -> None:
    path = FieldPath("$.region")
    doc = {"id": 1, "region": "eu", "items": [{"region": "nested"}]}
    assert path.get(json.dumps(doc)) == "eu"
    assert path.get(json.dumps(doc).encode()) == "eu"
    assert FieldPath("a.b").get(b'{"a": {"b": [1, 2]}}') == [1, 2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A nested object's key of the same name comes first: it is not the top-level field.
        ('{"meta": {"region": "inner"}, "region": "outer"}', "outer"),
        ('{"list": [{"region": "inner"}], "region": "outer"}', "outer"),
        # The key's text inside a string value is not a key.
        ('{"note": "a \\"region\\": \\"fake\\"", "region": "real"}', "real"),
        ('{"note": "region", "region": "real"}', "real"),
        ('{ "region" : "spaced" }', "spaced"),
        ('{"region": null}', None),
        ('{"region": {"code": 7}}', {"code": 7}),
    ],
)
def test_the_fast_path_reads_only_the_top_level_key(text: str, expected: object) -> None:
    assert FieldPath("region").get(text) == expected
    assert json.loads(text)["region"] == expected  # the same as a whole parse


def test_a_key_beyond_the_window_is_read_from_the_whole_document() -> None:
    doc = {f"k{i}": "x" * 40 for i in range(200)} | {"region": "far"}
    assert FieldPath("region").get(json.dumps(doc)) == "far"
    assert FieldPath("absent").get(json.dumps(doc)) is MISSING


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b"\xff\xfe", '{"region": ', "{broken"])
def test_payloads_that_are_no_json_object_are_unparseable(payload: object) -> None:
    assert FieldPath("region").get(payload) is UNPARSEABLE


def test_a_missing_key_in_valid_json_is_missing() -> None:
    assert FieldPath("region").get('{"id": 1}') is MISSING


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
@pytest.mark.parametrize("far", [False, True])
def test_bytes_are_decoded_as_json_loads_decodes_them(encoding: str, far: bool) -> None:
    doc = {"id": 1, "region": "ünï"}
    if far:  # the key beyond the window: the whole document is read
        doc = {f"k{i}": "x" * 40 for i in range(20)} | doc
    payload = json.dumps(doc, ensure_ascii=False).encode(encoding)
    assert json.loads(payload)["region"] == "ünï"
    assert FieldPath("region").get(payload) == "ünï"


def _reference(payload: bytes | str) -> object:
    """What a whole parse with json.loads reads as the field 'region'."""
    try:
        document = json.loads(payload)
    except ValueError:
        return UNPARSEABLE
    return document.get("region", MISSING) if isinstance(document, dict) else UNPARSEABLE


FILLER = ", ".join(f'"k{i}": "{"x" * 40}"' for i in range(20))


@pytest.mark.parametrize(
    "text",
    [
        f'{{{FILLER}, "region": "far"}}',
        f'{{{FILLER}, "region": "far"}}  \n',  # whitespace after the document
        f'  \n{{{FILLER}, "region": "far"}}',  # and before it
        f'{{{FILLER}, "region": "far"}} {{}}',  # extra data
        f'{{{FILLER}, "region": "far"}}}}',
        f'{{{FILLER}, "region": "far"',  # cut short
        f'{{{FILLER}, "inner": {{"region": "nested"}}}}',  # only a nested key of that name
        f"{{{FILLER}}}",  # no such key
        f'[{{{FILLER}, "region": "far"}}]',  # an array
        f'{{{FILLER}, "region": "\\ud800"}}',  # an escaped lone surrogate
        f'{{{FILLER}, "region": "\ud800"}}',  # a lone surrogate, which json.loads accepts
        '{"region": "\ud800"}',  # near the front too
    ],
)
def test_the_whole_document_is_read_as_json_loads_reads_it(text: str) -> None:
    expected = _reference(text)
    assert FieldPath("region").get(text) == expected
    assert FieldPath("region").get(text.encode("utf-8", "surrogatepass")) == expected
    assert FieldPath("region").get(bytearray(text.encode("utf-8", "surrogatepass"))) == expected
    assert FieldPath("region").get(memoryview(text.encode("utf-8", "surrogatepass"))) == expected


def test_a_nested_path_in_a_payload_walks_from_the_first_segment() -> None:
    payload = json.dumps({**{f"k{i}": "x" * 40 for i in range(20)}, "a": {"b": "deep"}})
    assert FieldPath("a.b").get(payload.encode()) == "deep"
    assert FieldPath("a.c").get(payload.encode()) is MISSING
