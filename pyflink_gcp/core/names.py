"""What a service accepts as a destination id: one :class:`NameRule` per service.

Each service's ``destinations.py`` holds its rule (``pyflink_gcp.pubsub.destinations.TOPIC_ID``
and so on) and validates with it when a destination is built; templates
(:mod:`pyflink_gcp.routing`, the SQL connectors) check every rendered name with the same rule,
and sanitize each placeholder's value with it when asked to, so routing and the destination
types cannot disagree.

A template such as ``orders_{tenant}`` takes part of a resource name from the record, and
records carry values no service accepts as a name (``acme/eu``, ``2024-05-01T10:00:00+00:00``).
Each rule therefore has two halves, because the two jobs differ:

- :meth:`NameRule.sanitize` makes one placeholder value safe: every character the service does
  not allow becomes the service's separator (``_``, or ``-`` where ``_`` is not allowed), and a
  value that starts the name with a character no name may start with (a digit, where only a
  letter may) gets the rule's :attr:`~NameRule.prefix`. It never changes case: BigQuery,
  Pub/Sub, Cloud Tasks and Bigtable names are case-sensitive, so lowercasing would merge two
  destinations the record keeps apart. Sanitizing can still merge two values (``acme/eu`` and
  ``acme_eu``); templates check for that (:mod:`pyflink_gcp.routing.templates`).
- :meth:`NameRule.validate` checks the whole name (lengths, the first character, reserved
  prefixes) and says why it is invalid, so a record that cannot be routed is reported with the
  reason instead of failing later in the service's API.

The rules are small immutable values, cheap on the hot path (no regular expression per call: the
allowed characters are stripped with ``bytes.translate``, which runs in C) and picklable by value,
so a template holding one travels to the Python workers with the job.
"""

from __future__ import annotations

import string
import unicodedata
from typing import Any

__all__ = ["NameRule"]

_ASCII_ALNUM = string.ascii_letters + string.digits


def _describe(chars: str) -> str:
    """The allowed characters in words, for reasons: ``letters, digits and hyphens``."""
    names = {"-": "hyphens", "_": "underscores", ".": "periods"}
    words = ["letters", "digits"] + [names.get(char, repr(char)) for char in chars]
    return ", ".join(words[:-1]) + " and " + words[-1]


class NameRule:
    """One service's naming rule for a destination id: which characters, how long, how it starts.

    Instances are immutable and compare and hash by their settings. Build one for a rule no
    service module defines (a PostgreSQL-dialect Spanner table, say) instead of subclassing.

    Args:
        label: What the name is, for messages (``"BigQuery table id"``).
        allowed: The characters a name may contain besides ASCII letters and digits.
        replacement: What :meth:`sanitize` puts in place of a character that is not allowed; one
            allowed character.
        min_length: The fewest characters of a valid name.
        max_length: The most characters of a valid name.
        first: None when any allowed character may start a name; otherwise the characters
            besides ASCII letters that may (``""``: letters only).
        first_digit: Whether a name may also start with a digit (read only when ``first`` is
            set).
        reserved_prefixes: Prefixes the service keeps for itself (compared case-sensitively).
        unicode_categories: Unicode general categories that :meth:`validate` also accepts
            (``"L"`` for every letter, or a two-letter one such as ``"Pd"``); :meth:`sanitize`
            keeps to ASCII all the same.
        max_bytes: The most UTF-8 bytes of a valid name, for a service that counts bytes.
        characters: The allowed characters in words, for messages; derived when None.
        prefix: What :meth:`sanitize` puts before a value that starts a name with a character
            no name may start with (read only when ``first`` is set). When None: the
            replacement if a name may start with it, else ``"x"`` (so ``9lives`` becomes
            ``x9lives`` as a Pub/Sub topic id).

    Raises:
        ValueError: ``replacement`` is not one allowed character, the lengths are inverted, or
            ``prefix`` is not allowed text that may start a name.
    """

    __slots__ = (
        "_args",
        "_categories",
        "_characters",
        "_first",
        "_first_words",
        "_bytes",
        "_chars",
        "label",
        "prefix",
        "max_bytes",
        "max_length",
        "min_length",
        "replacement",
        "reserved_prefixes",
    )

    label: str
    replacement: str
    prefix: str
    min_length: int
    max_length: int
    max_bytes: int | None
    reserved_prefixes: tuple[str, ...]
    _args: tuple[Any, ...]
    _bytes: bytes
    _chars: frozenset[str]
    _categories: frozenset[str]
    _characters: str
    _first: frozenset[str] | None
    _first_words: str

    def __init__(
        self,
        label: str,
        *,
        allowed: str,
        replacement: str,
        min_length: int,
        max_length: int,
        first: str | None = None,
        first_digit: bool = False,
        reserved_prefixes: tuple[str, ...] = (),
        unicode_categories: tuple[str, ...] = (),
        max_bytes: int | None = None,
        characters: str | None = None,
        prefix: str | None = None,
    ) -> None:
        chars = _ASCII_ALNUM + allowed
        if len(replacement) != 1 or replacement not in chars:
            raise ValueError(
                f"NameRule {label!r}: the replacement {replacement!r} must be one allowed character"
            )
        if not 1 <= min_length <= max_length:
            raise ValueError(f"NameRule {label!r}: lengths {min_length}-{max_length} are inverted")
        set_ = object.__setattr__
        set_(
            self,
            "_args",
            (
                label,
                allowed,
                replacement,
                min_length,
                max_length,
                first,
                first_digit,
                tuple(reserved_prefixes),
                tuple(unicode_categories),
                max_bytes,
                characters,
                prefix,
            ),
        )
        set_(self, "label", label)
        set_(self, "replacement", replacement)
        set_(self, "min_length", min_length)
        set_(self, "max_length", max_length)
        set_(self, "max_bytes", max_bytes)
        set_(self, "reserved_prefixes", tuple(reserved_prefixes))
        # bytes.translate(None, these) deletes every allowed character: what remains are the
        # characters that are not, so an empty result means "all allowed", decided in C.
        set_(self, "_bytes", chars.encode("ascii"))
        set_(self, "_chars", frozenset(chars))
        set_(self, "_categories", frozenset(unicode_categories))
        set_(self, "_characters", characters or _describe(allowed))
        if first is None:
            set_(self, "_first", None)
            set_(self, "_first_words", "")
            set_(self, "prefix", prefix or "")
        else:
            starts = string.ascii_letters + (string.digits if first_digit else "") + first
            options = ["a letter"] + (["a digit"] if first_digit else []) + [repr(c) for c in first]
            words = (
                options[0] if len(options) == 1 else ", ".join(options[:-1]) + " or " + options[-1]
            )
            set_(self, "_first", frozenset(starts))
            set_(self, "_first_words", words)
            if prefix is None:
                prefix = replacement if replacement in starts else "x"
            if not prefix or prefix[0] not in starts or any(c not in chars for c in prefix):
                raise ValueError(
                    f"NameRule {label!r}: the prefix {prefix!r} must be allowed text that may "
                    "start a name"
                )
            set_(self, "prefix", prefix)

    def sanitize(self, value: str, at_start: bool = False) -> str:
        """``value`` with every character the service does not allow replaced.

        Only ASCII letters and digits and the rule's ``allowed`` characters are kept; any other
        character, a non-ASCII letter too, becomes :attr:`replacement`, one for one, and case
        is unchanged. Lengths and reserved prefixes are left to :meth:`validate`: a
        placeholder value is usually only part of a name.

        Args:
            value: One placeholder's value.
            at_start: Whether the value starts the name: then a first character that no name
                may start with (a digit of a Pub/Sub topic id, a ``_`` made of ``/``) gets
                :attr:`prefix` before it (``9lives`` becomes ``x9lives``).
        """
        if value.isascii() and not value.encode().translate(None, self._bytes):
            clean = value
        else:
            chars = self._chars
            replacement = self.replacement
            clean = "".join(c if c in chars else replacement for c in value)
        if at_start and clean and self._first is not None and clean[0] not in self._first:
            return self.prefix + clean
        return clean

    def validate(self, name: str) -> str | None:
        """None when ``name`` is a valid id for the service, else why it is not.

        The reason is a phrase to follow the name in a message, e.g. ``"starts with '9'; a
        Pub/Sub topic id starts with a letter"``.
        """
        size = len(name)
        if size < self.min_length or size > self.max_length:
            what = "is empty" if not size else f"has {size} characters"
            return f"{what}; a {self.label} has {self._lengths()}"
        index = self._bad_character(name)
        if index is not None:
            return f"contains {name[index]!r} at position {index}; {self._allowed()}"
        reason = self._start(name)
        if reason is not None:
            return reason
        if self.max_bytes is not None and not name.isascii():
            size = len(name.encode("utf-8"))
            if size > self.max_bytes:
                return f"has {size} UTF-8 bytes; a {self.label} has at most {self.max_bytes}"
        return None

    def check_literal(self, literal: str, at_start: bool) -> tuple[int, str] | None:
        """Why a piece of a name can never be part of a valid name, or None.

        A template calls this once for each piece of its literal text when it is parsed, so
        text the service can never accept fails the configuration at once, instead of every
        record at run time (where a resolver may dead-letter them all); and, for a name that
        did not validate, on each placeholder's value, to name the value at fault.

        Args:
            literal: The literal text (escaped braces already unescaped), or a value.
            at_start: Whether it begins the name, so the first-character rule and the reserved
                prefixes apply.

        Returns:
            None, or the index in ``literal`` of the offending character and the reason.
        """
        index = self._bad_character(literal)
        if index is not None:
            return index, f"{literal[index]!r} is not allowed; {self._allowed()}"
        if at_start and literal:
            reason = self._start(literal)
            if reason is not None:
                return 0, reason
        return None

    def _bad_character(self, text: str) -> int | None:
        """The index of the first character of ``text`` the rule does not allow, or None."""
        if text.isascii() and not text.encode().translate(None, self._bytes):
            return None
        chars = self._chars
        categories = self._categories
        for index, char in enumerate(text):
            if char in chars:
                continue
            if categories:
                category = unicodedata.category(char)
                if category[0] in categories or category in categories:
                    continue
            return index
        return None

    def _start(self, text: str) -> str | None:
        if self._first is not None and text[0] not in self._first:
            return f"starts with {text[0]!r}; a {self.label} starts with {self._first_words}"
        for prefix in self.reserved_prefixes:
            if text.startswith(prefix):
                return f"starts with {prefix!r}, which a {self.label} may not"
        return None

    def _allowed(self) -> str:
        return f"a {self.label} allows only {self._characters}"

    def _lengths(self) -> str:
        return f"{self.min_length} to {self.max_length} characters"

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NameRule):
            return self._args == other._args
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._args)

    def __repr__(self) -> str:
        return f"NameRule({self.label!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, self._args)


def _rebuild(
    label: str,
    allowed: str,
    replacement: str,
    min_length: int,
    max_length: int,
    first: str | None,
    first_digit: bool,
    reserved_prefixes: tuple[str, ...],
    unicode_categories: tuple[str, ...],
    max_bytes: int | None,
    characters: str | None,
    prefix: str | None = None,
) -> NameRule:
    return NameRule(
        label,
        allowed=allowed,
        replacement=replacement,
        min_length=min_length,
        max_length=max_length,
        first=first,
        first_digit=first_digit,
        reserved_prefixes=reserved_prefixes,
        unicode_categories=unicode_categories,
        max_bytes=max_bytes,
        characters=characters,
        prefix=prefix,
    )
