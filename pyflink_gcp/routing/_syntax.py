"""A template's syntax: literal text and ``{path:spec}`` placeholders, parsed once.

:func:`parse` splits a template's text into literal strings and :class:`Placeholder` s when
the template is built (:class:`~pyflink_gcp.routing.templates.Template`), so rendering only
joins strings; the rules are in the templates module's docstring and ``docs/templates.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyflink_gcp.routing._times import TIME_DIRECTIVE, EpochFormat

if TYPE_CHECKING:
    from pyflink_gcp.routing._sanitizing import SanitizedValues

__all__ = ["Placeholder", "parse"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Placeholder:
    """One ``{path:spec}`` of a template, resolved into what rendering needs."""

    __slots__ = (
        "at_start",
        "cache",
        "epoch",
        "path",
        "position",
        "rest",
        "root",
        "source",
        "spec",
        "time_spec",
        "values",
    )

    def __init__(self, path: str, spec: str | None, position: int, source: str) -> None:
        segments = path.split(".")
        self.path = path
        self.root = segments[0]
        self.rest = tuple(segments[1:])
        self.spec = spec
        # A spec with a strftime directive ('%', an optional flag, a letter) is a time spec.
        # Python's own format specs use '%' only as their last character (the percentage
        # type), or as a fill character before an alignment, so '{ratio:.1%}' and '{n:%>5}'
        # stay format() specs.
        self.time_spec = spec is not None and TIME_DIRECTIVE.search(spec) is not None
        self.position = position
        self.source = source
        #: The spec applied to epoch milliseconds (a time spec only), its texts kept per unit.
        self.epoch = EpochFormat(spec) if spec is not None and self.time_spec else None
        #: Whether the placeholder's value starts the name (no literal text before it).
        self.at_start = position == 0
        #: A sanitizing template's values of this placeholder (None: values are kept as they
        #: render), and their cache of raw to sanitized text (None: the sanitizer runs every
        #: time); set by the template.
        self.values: SanitizedValues | None = None
        self.cache: dict[str, str] | None = None


def parse(
    text: str, error_type: type[Exception]
) -> tuple[tuple[str | Placeholder, ...], list[list[int]]]:
    """Split ``text`` into literal strings and placeholders, once, when the template is built.

    Returns:
        The parts in order (adjacent literal text merged, no empty strings), and for each
        literal part the position in ``text`` of each of its characters (escaped braces make
        them differ), for messages about literal text.

    Raises:
        error_type: A syntax error, naming the template and the position.
    """
    parts: list[str | Placeholder] = []
    literal: list[str] = []
    positions: list[int] = []
    literal_positions: list[list[int]] = []

    def error(reason: str, position: int, hint: str = "") -> Exception:
        hint = f" ({hint})" if hint else ""
        return error_type(f"template '{text}': {reason} at position {position}{hint}")

    def flush() -> None:
        if literal:
            parts.append("".join(literal))
            literal_positions.append(positions.copy())
            literal.clear()
            positions.clear()

    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char == "{":
            if text.startswith("{", i + 1):
                literal.append("{")
                positions.append(i)
                i += 2
                continue
            close = text.find("}", i + 1)
            nested = text.find("{", i + 1)
            if close < 0:
                raise error("unclosed '{'", i, "write '{{' for a literal brace")
            if 0 <= nested < close:
                raise error("'{' inside a placeholder", nested, "placeholders do not nest")
            body = text[i + 1 : close]
            if not body:
                raise error("empty placeholder '{}'", i)
            path, colon, spec = body.partition(":")
            _check_path(path, i + 1, error)
            flush()
            parts.append(
                Placeholder(path, spec if colon and spec else None, i, text[i : close + 1])
            )
            i = close + 1
        elif char == "}":
            if not text.startswith("}", i + 1):
                raise error("single '}'", i, "write '}}' for a literal brace")
            literal.append("}")
            positions.append(i)
            i += 2
        else:
            stop = min((p for p in (text.find("{", i), text.find("}", i)) if p >= 0), default=n)
            literal.append(text[i:stop])
            positions.extend(range(i, stop))
            i = stop
    flush()
    return tuple(parts), literal_positions


def _check_path(path: str, start: int, error: Callable[..., Exception]) -> None:
    """Raise unless ``path`` is identifiers joined by dots; ``start`` is its position."""
    if not path:
        raise error("placeholder without a field name", start)
    offset = start
    for segment in path.split("."):
        match = _IDENTIFIER.match(segment)
        end = match.end() if match else 0
        if end != len(segment) or not segment:
            bad = offset + end
            if not segment:
                raise error(f"empty field name in {path!r}", bad)
            raise error(
                f"invalid character {segment[end]!r} in field path {path!r}",
                bad,
                "a path is identifiers [A-Za-z_][A-Za-z0-9_]* joined by '.'",
            )
        offset += len(segment) + 1
