"""Destination-name templates: ``orders_{tenant}_{event_time:%Y%m%d}`` rendered per record.

One syntax serves every place a user names destinations as text: the SQL connectors' options
(``'table' = 'orders_{tenant}_{event_time:%Y%m%d}'``) and resolvers built from a template in a
DataStream job. The rules, in short (``docs/templates.md`` has them in full):

- Literal text with placeholders ``{path}`` or ``{path:spec}``; ``{{`` and ``}}`` are literal
  braces. A path is identifiers (``[A-Za-z_][A-Za-z0-9_]*``) joined by ``.`` for nested fields;
  the spec is everything after the first ``:`` up to the closing brace, without braces.
- A path's first segment is looked up in the record (a mapping's key, a PyFlink ``Row``'s field,
  another object's attribute), then each further segment in the value found. A record without
  that field may still name ``event_time`` (the record's event timestamp from the
  :class:`~pyflink_gcp.core.types.WriterContext`) or ``processing_time`` (the wall clock).
  ``processing_time`` gives up what the resolver contract otherwise guarantees, that a replay
  routes every record the way it went the first time: after a restart a replayed record may
  land in another destination than its first copy (the next day's table, say). Use it only
  where at-least-once duplicates may also be spread over two destinations.
- With a spec, dates and times use ``strftime``; a number under a time spec is epoch
  milliseconds and a string is parsed as ISO-8601; anything else goes through ``format()``.
  Without one, strings are kept, booleans are ``true``/``false``, dates and times are ISO-8601.
- A sanitizer (a :class:`~pyflink_gcp.core.names.NameRule`) replaces the characters the
  service does not allow in each placeholder's value, and the rendered name is validated.

A template is parsed once, into literal text and placeholders, and rendering joins strings:
no regular expression runs per record. It is immutable and pickles as its text and sanitizer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time
from typing import Any, Protocol, runtime_checkable

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing._helpers import MISSING, field_of, row_type
from pyflink_gcp.routing._times import TIME_DIRECTIVE, EpochFormat, from_epoch_millis

__all__ = [
    "EVENT_TIME",
    "PROCESSING_TIME",
    "Sanitizer",
    "Template",
    "TemplateError",
    "TemplateValueError",
]

#: The placeholder root that names the record's event timestamp when the record has no such
#: field.
EVENT_TIME = "event_time"
#: The placeholder root that names the wall clock when the record has no such field.
PROCESSING_TIME = "processing_time"
_BUILTIN_ROOTS = (EVENT_TIME, PROCESSING_TIME)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Sanitized values a template keeps, at most.
_CACHED_VALUES = 4_096


class TemplateError(ConfigurationError):
    """A template that cannot work: a syntax error, an unknown field, impossible literal text.

    Raised when the template is built or checked, never per record. A configuration error, so
    a job ends on it without restarts.
    """


class TemplateValueError(ValueError):
    """A record for which a template renders no valid name.

    The record lacks a placeholder's field, the value is None or cannot be formatted with the
    spec, or the rendered name is not one the sanitizer's service accepts. The message names the
    template, the placeholder (or the rendered name) and a short repr of the record. What it
    means is the caller's to decide: a BigQuery resolver, say, turns it into an
    :class:`~pyflink_gcp.core.types.UnroutableRecord`.
    """


@runtime_checkable
class Sanitizer(Protocol):
    """What a template needs from a sanitizer (every rule in :mod:`pyflink_gcp.routing.names`).

    ``sanitize`` is applied to each placeholder's rendered value, ``validate`` to the whole
    rendered name (None when valid, else the reason).
    """

    def sanitize(self, value: str) -> str: ...

    def validate(self, name: str) -> str | None: ...


class _Placeholder:
    """One ``{path:spec}`` of a template, resolved into what rendering needs."""

    __slots__ = (
        "epoch",
        "path",
        "position",
        "rest",
        "root",
        "source",
        "spec",
        "time_spec",
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


def _no_field(owner: str, value: Any, name: str) -> str:
    """The reason for a missing field, with a hint for a Row that has no field names."""
    reason = f"{owner} has no field {name!r}"
    row = row_type()
    if row is not None and isinstance(value, row) and getattr(value, "_fields", None) is None:
        reason += " (a Row without field names: give its type field names, Types.ROW_NAMED)"
    return reason


def _as_instant(value: Any) -> datetime | None:
    """A PyFlink ``Instant`` (anything with ``to_epoch_milli()``) as an aware UTC datetime."""
    to_millis = getattr(value, "to_epoch_milli", None)
    if to_millis is None or not callable(to_millis):
        return None
    return from_epoch_millis(to_millis())


def _parse_iso(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _format(value: Any, placeholder: _Placeholder) -> str:
    """The text of one placeholder's value (see the module docstring for the rules).

    Raises:
        ValueError, TypeError, OverflowError: The value cannot be formatted; the caller names
            the template and the record.
    """
    spec = placeholder.spec
    cls = type(value)
    if spec is None:
        if cls is str:
            return value  # type: ignore[no-any-return]
        if cls is bool:
            return "true" if value else "false"
        if isinstance(value, int):
            return int.__repr__(value)
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, bytes | bytearray | memoryview):
            raise TypeError("bytes have no text; decode them into a string field first")
        instant = _as_instant(value)
        if instant is not None:
            return instant.isoformat()
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.strftime(spec)
    if placeholder.time_spec:
        moment: datetime | None
        if isinstance(value, int | float) and cls is not bool:
            return placeholder.epoch(value)  # type: ignore[misc]
        if isinstance(value, str):
            try:
                moment = _parse_iso(value)
            except ValueError:
                raise ValueError(f"{value!r} is not an ISO-8601 date or timestamp") from None
        else:
            moment = _as_instant(value)
        if moment is not None:
            return moment.strftime(spec)
    return format(value, spec)


class Template:
    """A destination name with placeholders filled from each record.

    >>> from pyflink_gcp.routing import names
    >>> t = Template("orders_{tenant}_{event_time:%Y%m%d}", sanitizer=names.bigquery_table_id)
    >>> t.render({"tenant": "acme/eu"}, WriterContext(timestamp=1714557600000))
    'orders_acme_eu_20240501'

    Args:
        text: The template (see the module docstring for the syntax).
        sanitizer: A rule from :mod:`pyflink_gcp.routing.names` (or any object with
            ``sanitize(value) -> str`` and ``validate(name) -> str | None``), applied to every
            rendered placeholder value and then to the whole name; or a plain callable
            ``(value) -> str`` that only sanitizes. None keeps values as they render.

    Raises:
        TemplateError: A syntax error, naming the position (counted from 0); or, with a rule
            from :mod:`~pyflink_gcp.routing.names`, literal text the service can never accept,
            or a constant template that is not a valid name.
        TypeError: ``text`` is not a string, or ``sanitizer`` is neither a rule nor callable.
    """

    __slots__ = (
        "_cleaned",
        "_parts",
        "_placeholders",
        "_sanitize",
        "_validate",
        "placeholders",
        "roots",
        "sanitizer",
        "text",
    )

    text: str
    placeholders: tuple[str, ...]
    roots: frozenset[str]
    sanitizer: Sanitizer | Callable[[str], str] | None
    _parts: tuple[str | _Placeholder, ...]
    _placeholders: tuple[_Placeholder, ...]
    _sanitize: Callable[[str], str] | None
    _cleaned: dict[str, str] | None
    _validate: Callable[[str], str | None] | None

    def __init__(
        self, text: str, sanitizer: Sanitizer | Callable[[str], str] | None = None
    ) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a template is a string, got {type(text).__name__}")
        if not text:
            raise TemplateError("a template is a destination name and cannot be empty")
        sanitize: Callable[[str], str] | None
        validate: Callable[[str], str | None] | None
        if sanitizer is None:
            sanitize = validate = None
        elif callable(getattr(sanitizer, "sanitize", None)) and callable(
            getattr(sanitizer, "validate", None)
        ):
            sanitize = sanitizer.sanitize  # type: ignore[union-attr]
            validate = sanitizer.validate  # type: ignore[union-attr]
        elif callable(sanitizer):
            sanitize, validate = sanitizer, None
        else:
            raise TypeError(
                "a template's sanitizer is a rule from pyflink_gcp.routing.names (sanitize() and "
                f"validate()) or a callable (value) -> str, got {type(sanitizer).__name__}"
            )
        parts, literal_positions = _parse(text)
        placeholders = tuple(p for p in parts if isinstance(p, _Placeholder))
        set_ = object.__setattr__
        set_(self, "text", text)
        set_(self, "sanitizer", sanitizer)
        set_(self, "_parts", parts)
        set_(self, "_placeholders", placeholders)
        set_(self, "_sanitize", sanitize)
        # A NameRule's sanitize() is a pure function of the text, so its results are kept (by
        # the rendered text, at most _CACHED_VALUES); another sanitizer runs every time.
        set_(self, "_cleaned", {} if isinstance(sanitizer, NameRule) else None)
        set_(self, "_validate", validate)
        set_(self, "placeholders", tuple(p.path for p in placeholders))
        set_(self, "roots", frozenset(p.root for p in placeholders))
        self._check_literals(literal_positions)

    @property
    def is_constant(self) -> bool:
        """Whether the template has no placeholders (it renders the same name for every record)."""
        return not self._placeholders

    def check_fields(self, available: Iterable[str], owner: str) -> None:
        """Fail unless every placeholder's root names an available field.

        A SQL connector calls this with the table's column names when it is created, so a typo
        fails the DDL instead of every record. Only roots are checked (a nested field's type is
        not known here); ``event_time`` and ``processing_time`` are always known.

        Args:
            available: The record's top-level field names.
            owner: Who holds the template, first in the message (``"gcp-bigquery 'table'"``).

        Raises:
            TemplateError: ``"{owner}: unknown placeholder {path} in template '{text}'; known:
                a, b, event_time, processing_time"`` for the first placeholder (in template
                order) whose root is unknown; the known names are the available ones, sorted,
                then ``event_time`` and ``processing_time``.
        """
        names = set(available)
        for placeholder in self._placeholders:
            if placeholder.root not in names and placeholder.root not in _BUILTIN_ROOTS:
                known = sorted(names.difference(_BUILTIN_ROOTS)) + list(_BUILTIN_ROOTS)
                raise TemplateError(
                    f"{owner}: unknown placeholder {{{placeholder.path}}} in template "
                    f"'{self.text}'; known: {', '.join(known)}"
                )

    def render(
        self,
        record: Any,
        context: WriterContext | None = None,
        *,
        now: datetime | None = None,
        checked: bool = True,
    ) -> str:
        """The name for ``record``.

        Args:
            record: The record: a mapping, a PyFlink ``Row`` or any object with attributes.
            context: The writer context; its ``timestamp`` is ``event_time`` for a record
                without such a field.
            now: The wall clock for ``processing_time`` (default ``datetime.now(UTC)``, read
                once per call); a naive value is taken as UTC. Not deterministic on replay: see
                the module docstring.
            checked: Check the name against the sanitizer's service (:meth:`check`).

        Raises:
            TemplateValueError: A placeholder's field is missing or None, its value cannot be
                formatted with the spec, or the name is not valid for the sanitizer's service.
        """
        sanitize = self._sanitize
        cleaned = self._cleaned
        out = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            # A dict's key is read here, anything else by field_of (a call less per value).
            root = part.root
            value = record.get(root, MISSING) if type(record) is dict else field_of(record, root)
            epoch = False
            if value is MISSING:
                if root == EVENT_TIME:
                    stamp = context.timestamp if context is not None else None
                    # Without a timestamp, _event_millis raises, naming the cause.
                    value = (
                        stamp if stamp is not None else self._event_millis(part, record, context)
                    )
                    epoch = part.time_spec and not part.rest
                    if not epoch:
                        value = from_epoch_millis(value)
                elif root == PROCESSING_TIME:
                    if now is None:
                        now = datetime.now(UTC)
                    elif now.tzinfo is None:
                        now = now.replace(tzinfo=UTC)
                    value = now
                else:
                    raise self._value_error(part, record, _no_field("the record", record, root))
            if part.rest:
                value = self._nested(part, record, value)
            if value is None:
                raise self._value_error(part, record, "the value is missing (None)")
            try:
                if epoch:
                    text = part.epoch(value)  # type: ignore[misc]
                elif type(value) is str and part.spec is None:
                    text = value  # what _format returns, without the call
                else:
                    text = _format(value, part)
            except (ValueError, TypeError, OverflowError) as exc:
                raise self._value_error(
                    part, record, f"cannot format {short_repr(value)}: {exc}"
                ) from exc
            if sanitize is not None:
                clean = cleaned.get(text) if cleaned is not None else None
                if clean is None:
                    clean = sanitize(text)
                    if cleaned is not None:
                        if len(cleaned) >= _CACHED_VALUES:
                            cleaned.clear()
                        cleaned[text] = clean
                text = clean
            out.append(text)
        name = "".join(out)
        if checked:
            self.check(name, record)
        return name

    def check(self, name: str, record: Any = None) -> None:
        """Raise TemplateValueError unless ``name`` is valid for the sanitizer's service (a
        caller that renders with ``checked=False`` and keeps the names it checked)."""
        if self._validate is not None:
            reason = self._validate(name)
            if reason is not None:
                raise TemplateValueError(
                    f"template '{self.text}' rendered {name!r}, which {reason}; record "
                    f"{short_repr(record)}"
                )

    def _event_millis(self, part: _Placeholder, record: Any, context: WriterContext | None) -> int:
        timestamp = context.timestamp if context is not None else None
        if timestamp is None:
            raise self._value_error(
                part,
                record,
                "the record has no field 'event_time' and no event timestamp (assign timestamps "
                "with a WatermarkStrategy, or add the field)",
            )
        return timestamp

    def _nested(self, part: _Placeholder, record: Any, value: Any) -> Any:
        where = part.root
        for segment in part.rest:
            if value is None:
                raise self._value_error(part, record, f"{where!r} is None")
            found = field_of(value, segment)
            if found is MISSING:
                owner = f"{where!r} ({type(value).__name__})"
                raise self._value_error(part, record, _no_field(owner, value, segment))
            value = found
            where = f"{where}.{segment}"
        return value

    def _value_error(self, part: _Placeholder, record: Any, reason: str) -> TemplateValueError:
        return TemplateValueError(
            f"template '{self.text}': placeholder {part.source}: {reason}; record "
            f"{short_repr(record)}"
        )

    def _check_literals(self, literal_positions: list[list[int]]) -> None:
        """Refuse literal text the sanitizer's service can never accept, and invalid constants."""
        if self._validate is None:
            return
        if self.is_constant:
            name = "".join(p for p in self._parts if isinstance(p, str))
            reason = self._validate(name)
            if reason is not None:
                raise TemplateError(f"template '{self.text}' is not a valid name: it {reason}")
            return
        check = getattr(self.sanitizer, "check_literal", None)
        if check is None:
            return
        literals = iter(literal_positions)
        for index, part in enumerate(self._parts):
            if not isinstance(part, str):
                continue
            positions = next(literals)
            problem = check(part, index == 0)
            if problem is not None:
                at, reason = problem
                raise TemplateError(
                    f"template '{self.text}': the literal text at position {positions[at]} "
                    f"can never be part of a valid name: {reason}"
                )
        fixed = 0
        for literal in self._parts:
            if isinstance(literal, str):
                fixed += len(literal)
        longest = getattr(self.sanitizer, "max_length", None)
        if isinstance(longest, int) and fixed > longest:
            raise TemplateError(
                f"template '{self.text}': its literal text alone has {fixed} characters, more "
                f"than the {longest} a valid name has"
            )

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Template is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Template):
            return self.text == other.text and self.sanitizer == other.sanitizer
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        if self.sanitizer is None:
            return f"Template({self.text!r})"
        return f"Template({self.text!r}, sanitizer={self.sanitizer!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Template, (self.text, self.sanitizer))


def _parse(text: str) -> tuple[tuple[str | _Placeholder, ...], list[list[int]]]:
    """Split ``text`` into literal strings and placeholders, once, when the template is built.

    Returns:
        The parts in order (adjacent literal text merged, no empty strings), and for each
        literal part the position in ``text`` of each of its characters (escaped braces make
        them differ), for messages about literal text.

    Raises:
        TemplateError: A syntax error, naming the template and the position.
    """
    parts: list[str | _Placeholder] = []
    literal: list[str] = []
    positions: list[int] = []
    literal_positions: list[list[int]] = []

    def error(reason: str, position: int, hint: str = "") -> TemplateError:
        hint = f" ({hint})" if hint else ""
        return TemplateError(f"template '{text}': {reason} at position {position}{hint}")

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
                _Placeholder(path, spec if colon and spec else None, i, text[i : close + 1])
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


def _check_path(path: str, start: int, error: Callable[..., TemplateError]) -> None:
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
