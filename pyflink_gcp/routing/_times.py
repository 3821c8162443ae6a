"""Epoch milliseconds under a template's time spec, formatted once per unit the spec shows.

A template such as ``orders_{event_time:%Y%m%d}`` formats each record's event time, and
``datetime.strftime`` is most of what rendering a name costs. A spec only tells instants
apart down to its smallest directive (a day for ``%Y%m%d``, an hour with ``%H``), and times
are UTC, so days, hours and minutes start at multiples of their length since the epoch: each
unit's text is formatted once and kept. A text that must be formatted comes from
``time.gmtime`` when every directive is one ``time.strftime`` formats as a datetime would,
else from ``datetime.strftime``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from time import gmtime, strftime

#: A strftime directive: '%', an optional flag, a letter.
TIME_DIRECTIVE = re.compile(r"%[-_0^#:]?[A-Za-z]")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY = 86_400_000
#: What each strftime directive depends on, in milliseconds: the date (a UTC day), the hour,
#: the minute, the second, the millisecond (``%f``); UTC's zone name and offset are
#: constants. A directive not listed counts as seconds.
UNITS = dict.fromkeys("aAbBCdDeFgGhjmnuUVwWxyYzZt", _DAY)
UNITS.update(dict.fromkeys("HIklp", 3_600_000), M=60_000, R=60_000, f=1)
UNITS.update(dict.fromkeys("STXcr", 1_000))
#: The directives ``time.strftime`` formats from ``time.gmtime`` as ``datetime.strftime``
#: does (it hands every directive but these to ``time.strftime``, with the same fields).
_GMTIME_DIRECTIVES = frozenset(UNITS).difference("fzZ")
#: The epoch milliseconds a datetime can hold (years 1 to 9999).
_DATETIME_MILLIS = range(-62_135_596_800_000, 253_402_300_800_000)
#: Formatted texts a spec keeps, at most.
CACHED_TIMES = 1_024


def time_unit(spec: str) -> int:
    """The milliseconds ``spec`` cannot tell apart: 86,400,000 for ``%Y%m%d``, 1,000 for
    ``%H%M%S``, 1 with ``%f``."""
    unit = _DAY
    for directive in TIME_DIRECTIVE.findall(spec):
        unit = min(unit, UNITS.get(directive[-1], 1_000))
    return unit


class EpochFormat:
    """One time spec, applied to epoch milliseconds as UTC, with a text cache per unit.

    The cache is a dict of at most :data:`CACHED_TIMES` texts by ``millis // unit``, emptied
    when full (a replay that crosses more units starts over). A concurrent caller reads a
    text or none, never another unit's.
    """

    __slots__ = ("_gmtime", "_texts", "spec", "unit")

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.unit = time_unit(spec)
        self._texts: dict[float, str] = {}
        self._gmtime = all(d[-1] in _GMTIME_DIRECTIVES for d in TIME_DIRECTIVE.findall(spec))

    def __call__(self, millis: float) -> str:
        unit = self.unit
        key = millis // unit if unit != 1 else millis  # '%f': a float's microseconds count
        texts = self._texts
        text = texts.get(key)
        if text is None:
            text = self._format(millis)
            if len(texts) >= CACHED_TIMES:
                texts.clear()
            texts[key] = text
        return text

    def _format(self, millis: float) -> str:
        """The text ``datetime.strftime`` gives, from ``time.gmtime`` when it gives the same
        (``time.strftime`` of a ``struct_time`` is cheaper than building a ``datetime``)."""
        if self._gmtime and int(millis) in _DATETIME_MILLIS:
            return strftime(self.spec, gmtime(millis // 1000))
        # Out of a datetime's range it raises what it always raised.
        return from_epoch_millis(millis).strftime(self.spec)


def from_epoch_millis(millis: float) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=millis)
