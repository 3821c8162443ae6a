"""A template's sanitized values, and the check that sanitizing merges no two of them.

Sanitizing maps many values to one: ``acme/eu`` and ``acme_eu`` both become ``acme_eu`` under
BigQuery's rule, and their records would land in one table, silently. So each placeholder of a
sanitizing template remembers which raw value owns each sanitized text: the first value seen
owns it, and a second, different value that sanitizes to the same text is a
:class:`Collision`, which makes its records unroutable (the template raises; a resolver turns
that into an :class:`~pyflink_gcp.core.types.UnroutableRecord`) and logs a warning once for
the pair. Nothing is merged: within the window below, a sanitized text stands for one raw value.

Memory is bounded by the template's cache of sanitized values: the owners of all of a
template's placeholders and the values that collided count together against the cache's bound
(4,096 values), and when that many are kept they are all forgotten, except the pairs found
colliding, so a value keeps losing to the value it lost to. The check therefore covers what one template instance sees: one subtask (each
subtask of a job holds its own copy of the resolver), within the last few thousand distinct
values. Two subtasks may each see a different one of two colliding values first; a stream
keyed by the sanitized value brings both to one subtask.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Collision", "SanitizedValues", "Window"]

_LOG = logging.getLogger("pyflink_gcp.routing")


class Collision(Exception):
    """A raw value that sanitizes to the text another raw value already owns.

    Attributes:
        value: The value now refused.
        owner: The value seen first, which keeps the sanitized text.
        text: What both sanitize to.
    """

    def __init__(self, value: str, owner: str, text: str) -> None:
        super().__init__(value, owner, text)
        self.value = value
        self.owner = owner
        self.text = text


class Window:
    """The bound shared by a template's placeholders: how many values they keep, together."""

    __slots__ = ("bound", "kept", "members")

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.kept = 0
        self.members: list[SanitizedValues] = []

    def make_room(self) -> None:
        """Forget every value but the colliding pairs when the window is full.

        The pairs are kept (their owners too) so that ownership does not flip when the window
        turns over; if they alone fill half the window, they are forgotten as well.
        """
        if self.kept < self.bound:
            return
        pairs = sum(len(member.collided) for member in self.members)
        keep = pairs * 2 < self.bound
        self.kept = 0
        for member in self.members:
            self.kept += member.forget(keep)


class SanitizedValues:
    """One placeholder's sanitized values: what each raw value became, and who owns each text.

    Args:
        sanitize: The placeholder's sanitizer, a function of the raw text.
        window: The template's bound.
        cached: Whether ``sanitize`` is pure (a naming rule's), so its results are kept in
            :attr:`cache` and looked up before :meth:`clean` is called; a plain function runs
            for every value and only its owners are kept.
        where: What the warning names (``"template 'orders_{tenant}' placeholder {tenant}"``).
    """

    __slots__ = ("_sanitize", "_where", "_window", "cache", "collided", "owners")

    def __init__(
        self, sanitize: Callable[[str], str], window: Window, cached: bool, where: str
    ) -> None:
        self._sanitize = sanitize
        self._window = window
        self._where = where
        #: Raw text to sanitized text, of the values that own their text (a rule's only).
        self.cache: dict[str, str] | None = {} if cached else None
        #: Sanitized text to the raw value that owns it.
        self.owners: dict[str, str] = {}
        #: Raw values refused, to the value that owns their text.
        self.collided: dict[str, str] = {}
        window.members.append(self)

    def clean(self, raw: str) -> str:
        """The sanitized text of ``raw``, now owned by it unless another value owns it.

        Raises:
            Collision: Another raw value, seen first, sanitizes to the same text.
        """
        owner = self.collided.get(raw)
        if owner is not None:
            raise Collision(raw, owner, self._sanitize(raw))
        text = self._sanitize(raw)
        owner = self.owners.get(text)
        if owner is None:
            self._window.make_room()
            self.owners[text] = raw
            if self.cache is not None:
                self.cache[raw] = text
            self._window.kept += 1
            return text
        if owner == raw:
            return text
        self._window.make_room()
        # make_room may have forgotten the owner: the value that owns the text now is raw.
        if self.owners.get(text) is None:
            return self.clean(raw)
        self.collided[raw] = owner
        self._window.kept += 1
        _LOG.warning(
            "%s: the values %r and %r both sanitize to %r; %r, seen first, keeps the name, and "
            "records with %r are unroutable (logged once per pair)",
            self._where,
            owner,
            raw,
            text,
            owner,
            raw,
        )
        raise Collision(raw, owner, text)

    def forget(self, keep_pairs: bool) -> int:
        """Empty the window (in place: the template holds :attr:`cache`); the colliding pairs
        stay with ``keep_pairs``. Returns how many entries are kept."""
        if self.cache is not None:
            self.cache.clear()
        self.owners.clear()
        if not keep_pairs:
            self.collided.clear()
            return 0
        for owner in set(self.collided.values()):
            text = self._sanitize(owner)
            self.owners[text] = owner
            if self.cache is not None:
                self.cache[owner] = text
        return len(self.owners) + len(self.collided)
