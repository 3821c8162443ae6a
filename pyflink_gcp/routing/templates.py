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
- A rule (a :class:`~pyflink_gcp.core.names.NameRule`) checks every rendered name; a value
  the service cannot take is refused, naming the value and the rule. With ``sanitize=True``
  the rule first replaces the characters the service does not allow in each placeholder's
  value, and two values that sanitize to one text are refused rather than merged.

A template is parsed once, into literal text and placeholders, and rendering joins strings:
no regular expression runs per record. It is immutable and pickles as its text, rule and
switch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time
from functools import partial
from typing import Any, Protocol, runtime_checkable

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing._helpers import MISSING, field_of, row_type
from pyflink_gcp.routing._sanitizing import Collision, SanitizedValues, Window
from pyflink_gcp.routing._syntax import Placeholder, parse
from pyflink_gcp.routing._times import from_epoch_millis

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

#: Sanitized values a template keeps, at most (with the collision check's owners).
_CACHED_VALUES = 4_096


class TemplateError(ConfigurationError):
    """A template that cannot work: a syntax error, an unknown field, impossible literal text.

    Raised when the template is built or checked, never per record. A configuration error, so
    a job ends on it without restarts.
    """


class TemplateValueError(ValueError):
    """A record for which a template renders no valid name.

    The record lacks a placeholder's field, the value is None or cannot be formatted with the
    spec, the rendered name is not one the rule's service accepts, or sanitizing made the value
    what another value already renders. The message names the
    template, the placeholder (or the rendered name) and a short repr of the record. What it
    means is the caller's to decide: a BigQuery resolver, say, turns it into an
    :class:`~pyflink_gcp.core.types.UnroutableRecord`.
    """


@runtime_checkable
class Sanitizer(Protocol):
    """What a template needs from a naming rule (every rule in :mod:`pyflink_gcp.routing.names`).

    ``validate`` is applied to the whole rendered name (None when valid, else the reason);
    ``sanitize``, with ``sanitize=True``, to each placeholder's rendered value.
    """

    def sanitize(self, value: str) -> str: ...

    def validate(self, name: str) -> str | None: ...


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


def _format(value: Any, placeholder: Placeholder) -> str:
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
    """A destination name with placeholders filled from each record, checked by a naming rule.

    >>> from pyflink_gcp.routing import names
    >>> t = Template("orders_{tenant}_{event_time:%Y%m%d}", names.bigquery_table_id, sanitize=True)
    >>> t.render({"tenant": "acme/eu"}, WriterContext(timestamp=1714557600000))
    'orders_acme_eu_20240501'

    With a rule, every rendered name is checked by it; values are changed only with
    ``sanitize=True``. Without sanitizing, ``acme/eu`` renders ``orders_acme/eu_20240501``,
    which the rule refuses: :class:`TemplateValueError` names the value and the rule. With it,
    two values that sanitize to one text (``acme/eu``, then ``acme_eu``) are a collision: the
    value seen second raises :class:`TemplateValueError` naming both, and a warning is logged
    once for the pair (:mod:`pyflink_gcp.routing._sanitizing` has the scope of that check).

    Args:
        text: The template (see the module docstring for the syntax).
        rule: A rule from :mod:`pyflink_gcp.routing.names` (or any object with
            ``validate(name) -> str | None``, and ``sanitize(value) -> str`` to sanitize):
            every rendered name is checked by it. None checks nothing.
        sanitize: Replace, in each placeholder's value, the characters ``rule`` does not
            allow (:meth:`NameRule.sanitize <pyflink_gcp.core.names.NameRule.sanitize>`),
            with the collision check. Off by default: a value the service cannot take makes
            the record unroutable instead of changing its destination.
        sanitizer: Shorthand kept from earlier versions: a rule here is ``rule=...,
            sanitize=True``; a plain callable ``(value) -> str`` is applied to every value
            (with the collision check, without a cache), and ``rule``, if given, checks the
            name.

    Raises:
        TemplateError: A syntax error, naming the position (counted from 0); or, with a rule
            from :mod:`~pyflink_gcp.routing.names`, literal text the service can never accept,
            or a constant template that is not a valid name.
        TypeError: ``text`` is not a string, ``rule`` has no ``validate``, ``sanitize=True``
            without a rule that sanitizes, or two rules.
    """

    __slots__ = (
        "_parts",
        "_placeholders",
        "_probes",
        "_sanitizing",
        "_validate",
        "placeholders",
        "roots",
        "rule",
        "sanitizer",
        "sanitizes",
        "text",
    )

    text: str
    placeholders: tuple[str, ...]
    roots: frozenset[str]
    #: The naming rule every name is checked by (None: none).
    rule: Sanitizer | None
    #: Whether placeholder values are sanitized.
    sanitizes: bool
    #: What sanitizes them: the rule, a plain callable, or None.
    sanitizer: Sanitizer | Callable[[str], str] | None
    _parts: tuple[str | Placeholder, ...]
    _placeholders: tuple[Placeholder, ...]
    _sanitizing: bool
    _validate: Callable[[str], str | None] | None
    _probes: list[Template]

    def __init__(
        self,
        text: str,
        rule: Sanitizer | None = None,
        *,
        sanitize: bool = False,
        sanitizer: Sanitizer | Callable[[str], str] | None = None,
    ) -> None:
        if not isinstance(text, str):
            raise TypeError(f"a template is a string, got {type(text).__name__}")
        if not text:
            raise TemplateError("a template is a destination name and cannot be empty")
        function: Callable[[str], str] | None = None
        if sanitizer is not None:
            if _is_rule(sanitizer):
                if rule is not None and rule != sanitizer:
                    raise TypeError("a template takes one rule: give rule= or sanitizer=")
                rule, sanitize = sanitizer, True  # type: ignore[assignment]
            elif callable(sanitizer):
                function = sanitizer
            else:
                raise TypeError(
                    "a template's sanitizer is a rule from pyflink_gcp.routing.names (sanitize() "
                    f"and validate()) or a callable (value) -> str, got {type(sanitizer).__name__}"
                )
        if rule is not None and not callable(getattr(rule, "validate", None)):
            raise TypeError(
                "a template's rule is one of pyflink_gcp.routing.names (or has validate(name)), "
                f"got {type(rule).__name__}; a function of the value goes in sanitizer="
            )
        if sanitize and function is None and not callable(getattr(rule, "sanitize", None)):
            raise TypeError("sanitize=True needs a rule that sanitizes (pyflink_gcp.routing.names)")
        parts, literal_positions = parse(text, TemplateError)
        placeholders = tuple(p for p in parts if isinstance(p, Placeholder))
        sanitizes = bool(sanitize) or function is not None
        set_ = object.__setattr__
        set_(self, "text", text)
        set_(self, "rule", rule)
        set_(self, "sanitizes", sanitizes)
        set_(self, "sanitizer", function if function is not None else rule if sanitizes else None)
        set_(self, "_parts", parts)
        set_(self, "_placeholders", placeholders)
        set_(self, "_sanitizing", sanitizes and bool(placeholders))
        set_(self, "_validate", rule.validate if rule is not None else None)
        set_(self, "_probes", [])
        set_(self, "placeholders", tuple(p.path for p in placeholders))
        set_(self, "roots", frozenset(p.root for p in placeholders))
        self._check_literals(literal_positions)
        if sanitizes:
            # A NameRule's sanitize() is a pure function of the text, so its results are kept
            # (at most _CACHED_VALUES, with the owners the collision check needs); another
            # sanitizer runs every time.
            window = Window(_CACHED_VALUES)
            for part in placeholders:
                part.values = SanitizedValues(
                    self._value_sanitizer(part),
                    window,
                    cached=isinstance(self.sanitizer, NameRule),
                    where=f"template '{text}' placeholder {part.source}",
                )
                part.cache = part.values.cache

    def _value_sanitizer(self, part: Placeholder) -> Callable[[str], str]:
        """The function sanitizing ``part``'s values: a NameRule's knows whether they start the
        name (it may prefix them)."""
        sanitizer = self.sanitizer
        if isinstance(sanitizer, NameRule) and part.at_start:
            return partial(sanitizer.sanitize, at_start=True)
        if _is_rule(sanitizer):
            return sanitizer.sanitize  # type: ignore[union-attr]
        return sanitizer  # type: ignore[return-value]

    def sanitize_value(self, text: str, index: int = 0) -> str:
        """What sanitizing makes of ``text`` as the value of the ``index``-th placeholder
        (counted from 0), without the collision check; ``text`` itself when the template does
        not sanitize. ``pyflink-gcp plan`` lists collisions with it."""
        if not self.sanitizes:
            return text
        return self._value_sanitizer(self._placeholders[index])(text)

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
            checked: Check the name by the rule (:meth:`check`).

        Raises:
            TemplateValueError: A placeholder's field is missing or None, its value cannot be
                formatted with the spec, its sanitized value collides with another value's, or
                (``checked``) the name is not valid by the rule.
        """
        sanitizing = self._sanitizing
        collision: tuple[Placeholder, Collision] | None = None
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
            if sanitizing:
                cache = part.cache
                clean = cache.get(text) if cache is not None else None
                if clean is None:
                    try:
                        clean = part.values.clean(text)  # type: ignore[union-attr]
                    except Collision as exc:
                        # The rest is rendered all the same, to name the destination.
                        collision = collision or (part, exc)
                        clean = exc.text
                text = clean
            out.append(text)
        name = "".join(out)
        if collision is not None:
            where, found = collision
            raise TemplateValueError(
                f"template '{self.text}': placeholder {where.source}: the values "
                f"{found.owner!r} and {found.value!r} both sanitize to {found.text!r}, so both "
                f"would be {name!r}; {found.owner!r}, seen first, keeps it and {found.value!r} "
                f"is unroutable; record {short_repr(record)}"
            )
        if checked:
            self._check(name, record, context, now)
        return name

    def check(self, name: str, record: Any = None, context: WriterContext | None = None) -> None:
        """Raise TemplateValueError unless ``name`` is valid by the rule (for a caller that
        renders with ``checked=False`` and keeps the names it checked).

        Without sanitizing, a value with a character the rule does not allow (or that starts
        the name as no name may) is named with the rule's reason; ``record`` and ``context``
        are read again to find it.
        """
        self._check(name, record, context, None)

    def _check(
        self, name: str, record: Any, context: WriterContext | None, now: datetime | None
    ) -> None:
        if self._validate is None:
            return
        reason = self._validate(name)
        if reason is None:
            return
        value = None if self.sanitizes else self._value_at_fault(record, context, now)
        if value is not None:
            source, text, why = value
            raise TemplateValueError(
                f"template '{self.text}': placeholder {source} is {text!r}: {why} (values are "
                f"not sanitized); record {short_repr(record)}"
            )
        raise TemplateValueError(
            f"template '{self.text}' rendered {name!r}, which {reason}; record {short_repr(record)}"
        )

    def _value_at_fault(
        self, record: Any, context: WriterContext | None, now: datetime | None
    ) -> tuple[str, str, str] | None:
        """The first placeholder whose value the rule refuses as part of a name: its source,
        its text and the reason (None: the name as a whole is at fault, or the rule cannot
        say)."""
        check = getattr(self.rule, "check_literal", None)
        if check is None or record is None:
            return None
        probes = self._probes
        if not probes:
            probes.extend(Template(part.source) for part in self._placeholders)
        for part, probe in zip(self._placeholders, probes, strict=True):
            try:
                text = probe.render(record, context, now=now, checked=False)
            except TemplateValueError:
                return None
            problem = check(text, part.at_start)
            if problem is not None:
                return part.source, text, problem[1]
        return None

    def _event_millis(self, part: Placeholder, record: Any, context: WriterContext | None) -> int:
        timestamp = context.timestamp if context is not None else None
        if timestamp is None:
            raise self._value_error(
                part,
                record,
                "the record has no field 'event_time' and no event timestamp (assign timestamps "
                "with a WatermarkStrategy, or add the field)",
            )
        return timestamp

    def _nested(self, part: Placeholder, record: Any, value: Any) -> Any:
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

    def _value_error(self, part: Placeholder, record: Any, reason: str) -> TemplateValueError:
        return TemplateValueError(
            f"template '{self.text}': placeholder {part.source}: {reason}; record "
            f"{short_repr(record)}"
        )

    def _check_literals(self, literal_positions: list[list[int]]) -> None:
        """Refuse literal text the rule's service can never accept, and invalid constants."""
        if self._validate is None:
            return
        if self.is_constant:
            name = "".join(p for p in self._parts if isinstance(p, str))
            reason = self._validate(name)
            if reason is not None:
                raise TemplateError(f"template '{self.text}' is not a valid name: it {reason}")
            return
        check = getattr(self.rule, "check_literal", None)
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
        longest = getattr(self.rule, "max_length", None)
        if isinstance(longest, int) and fixed > longest:
            raise TemplateError(
                f"template '{self.text}': its literal text alone has {fixed} characters, more "
                f"than the {longest} a valid name has"
            )

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Template is immutable")

    def _args(self) -> tuple[Any, ...]:
        """What the template is made of: text, rule, whether it sanitizes, a plain sanitizer."""
        function = None if self.sanitizer is self.rule else self.sanitizer
        return (self.text, self.rule, self.sanitizes and function is None, function)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Template):
            return self._args() == other._args()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        text, rule, sanitize, function = self._args()
        args = [repr(text)]
        if rule is not None:
            args.append(f"rule={rule!r}")
        if sanitize:
            args.append("sanitize=True")
        if function is not None:
            args.append(f"sanitizer={function!r}")
        return f"Template({', '.join(args)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, self._args())


def _rebuild(
    text: str, rule: Any, sanitize: bool, function: Callable[[str], str] | None
) -> Template:
    return Template(text, rule, sanitize=sanitize, sanitizer=function)


def _is_rule(value: Any) -> bool:
    """Whether ``value`` is a naming rule: it has ``sanitize`` and ``validate``."""
    return callable(getattr(value, "sanitize", None)) and callable(getattr(value, "validate", None))
