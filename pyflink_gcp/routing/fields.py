"""Field paths into records: the routing field of a dict, a Row, an object, or a JSON payload.

``FieldPath("customer.region")`` reads ``record["customer"]["region"]`` from a mapping, the
same fields of a PyFlink ``Row`` or attributes of an object, and, from a ``str`` or ``bytes``
record, the same path in the JSON document it holds (``$.customer.region`` is accepted too).

A JSON payload is parsed whole only when it must be. When the first segment's key, quoted and
followed by ``:``, is in the first 512 characters at depth one of the top-level object (the
text before it, string literals removed, opens one more ``{`` than it closes and as many
``[`` as ``]``), only its value is decoded (``json.JSONDecoder.raw_decode``); otherwise the
whole document is, as ``json.loads`` would (bytes decoded by the encoding it detects, only
whitespace after the document), without its per-call overhead: the whole parse then costs what
``json.loads`` costs (``bench/README.md``, "Routing helpers", compares both with
``json.loads``). A document read the fast way is not validated past its routing field: it
routes even if it is broken further on (the sink's serializer sees the whole payload later). One whose field cannot be read is
:data:`UNPARSEABLE` to the caller.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.routing._helpers import MISSING, field_of

#: The value of a field that could not be read because the payload is not JSON.
UNPARSEABLE: Any = object()
_DECODER = json.JSONDecoder()
#: A complete JSON string literal (escapes included).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_WHITESPACE = " \t\n\r"
#: How far into a JSON payload a routing key is read without parsing the document: past it,
#: checking the text before the key (``_at_depth_one``) costs more than ``json.loads``.
_FAST_WINDOW = 512


class FieldPath:
    """A dotted path (``a.b.c``; ``$.a.b.c`` for JSON readers) into a record.

    Args:
        path: The segments, joined by ``.``; each one a key, a Row field or an attribute.

    Raises:
        ConfigurationError: An empty path or an empty segment.
    """

    __slots__ = ("path", "segments", "_first", "_first_key", "_rest")

    def __init__(self, path: str) -> None:
        if not isinstance(path, str):
            raise ConfigurationError(f"a field path is a string like 'region', got {path!r}")
        text = path[2:] if path.startswith("$.") else path
        segments = tuple(text.split("."))
        if not text or any(not s for s in segments):
            raise ConfigurationError(
                f"field path {path!r} has an empty segment: use names joined by '.', "
                "e.g. 'customer.region'"
            )
        self.path = path
        self.segments = segments
        self._first = segments[0]
        self._rest = segments[1:]
        self._first_key = json.dumps(segments[0], ensure_ascii=False)

    def get(self, record: Any) -> Any:
        """The field's value, :data:`~pyflink_gcp.routing._helpers.MISSING` when the record
        has no such field, or :data:`UNPARSEABLE` for a str/bytes record that is not JSON."""
        cls = type(record)
        if cls is bytes or cls is str or isinstance(record, bytes | bytearray | memoryview | str):
            value = self._json_first(record if cls is str else _json_text(record))
            if value is MISSING or value is UNPARSEABLE or not self._rest:
                return value
            return _walk(value, self._rest)
        return _walk(record, self.segments)

    def _json_first(self, text: str | None) -> Any:
        """The first segment's value in the JSON object ``text``: decoded alone when the key
        is near the front, else from the whole document."""
        if text is None:
            return UNPARSEABLE
        if not text.startswith("{"):
            text = text.lstrip(_WHITESPACE)
            if not text.startswith("{"):
                return UNPARSEABLE
        needle = self._first_key
        stop = _FAST_WINDOW + len(needle)
        at = text.find(needle, 0, stop)
        while at >= 0:
            after = at + len(needle)
            colon = _skip_whitespace(text, after)
            if colon < len(text) and text[colon] == ":" and _at_depth_one(text[:at]):
                try:
                    value, _ = _DECODER.raw_decode(text, _skip_whitespace(text, colon + 1))
                except ValueError:
                    return UNPARSEABLE
                return value
            at = text.find(needle, after, stop)
        # Further in, checking the text before the key costs more than parsing it all. The
        # text starts with '{', so the document is decoded from there (what json.loads does
        # after skipping whitespace), and only whitespace may follow it.
        try:
            document, end = _DECODER.raw_decode(text)
        except ValueError:
            return UNPARSEABLE
        if end != len(text) and text[end:].strip(_WHITESPACE):
            return UNPARSEABLE  # json.loads: "Extra data"
        return document.get(self._first, MISSING)

    def __repr__(self) -> str:
        return f"FieldPath({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPath) and other.segments == self.segments

    def __hash__(self) -> int:
        return hash(self.segments)


def _json_text(payload: bytes | bytearray | memoryview | str) -> str | None:
    """A JSON payload as text, decoded as ``json.loads`` decodes bytes (None if it cannot be).

    Most payloads start with ``{`` and are UTF-8 (a NUL second byte would mean UTF-16 or
    UTF-32): those are decoded directly, the rest by the encoding ``json.detect_encoding``
    finds, the same one ``json.loads`` would use.
    """
    if isinstance(payload, str):
        return payload
    data = bytes(payload)
    try:
        if data.startswith(b"{") and data[1:2] != b"\x00":
            return data.decode("utf-8", "surrogatepass")
        return data.decode(json.detect_encoding(data), "surrogatepass")
    except UnicodeDecodeError:
        return None


def _walk(value: Any, segments: tuple[str, ...]) -> Any:
    for segment in segments:
        if value is None:
            return MISSING
        value = field_of(value, segment)
        if value is MISSING:
            return MISSING
    return value


def _skip_whitespace(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _at_depth_one(prefix: str) -> bool:
    """Whether a key starting right after ``prefix`` is a key of the top-level object (not
    inside a string, a nested object, or an array)."""
    bare = _STRING.sub("", prefix)
    if '"' in bare:  # an unterminated string: the match is inside a string literal
        return False
    return bare.count("{") - bare.count("}") == 1 and bare.count("[") == bare.count("]")
