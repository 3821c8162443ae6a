"""Epoch milliseconds under a time spec: the unit each spec is cached by, and texts that are
the ones datetime.strftime gives whichever way they are built and however the cache churns."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing import Template, _times
from pyflink_gcp.routing._times import EpochFormat

# 2024-05-01T10:00:00Z
MAY_1 = 1714557600000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "unit"),
    [
        ("%Y%m%d", 86_400_000),
        ("%Y-%m-%d %Z%z", 86_400_000),
        ("%G-W%V-%u", 86_400_000),
        ("%Y%m%d%H", 3_600_000),
        ("%I%p", 3_600_000),
        ("%H:%M", 60_000),
        ("%H%M%S", 1_000),
        ("%c", 1_000),
        ("%-S", 1_000),
        ("%s", 1_000),  # not listed: seconds
        ("%S.%f", 1),
    ],
)
def test_a_spec_is_cached_by_the_smallest_unit_it_shows(spec: str, unit: int) -> None:
    assert _times.time_unit(spec) == unit


# Specs built from the date's fields, from time.gmtime, and by datetime.strftime.
SPECS = [
    "%Y%m%d",
    "%Y-%m-%dT%H:%M:%S",
    "{%y}%m%%d",
    "%Y%m%d%H",
    "%H:%M",
    "%j_%U_%W_%a_%p",
    "%-d.%-m",
    "%S.%f",
    "%s",
    "%Y%m%d %Z%z",
]


@pytest.mark.parametrize("spec", SPECS)
def test_texts_are_the_ones_strftime_gives_in_any_order(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Instants a few ms to a few days apart, out of order, in years of fewer than four digits,
    # before and after the epoch and across every unit's boundary, with a cache small enough
    # to be emptied on the way.
    monkeypatch.setattr(_times, "CACHED_TIMES", 8)
    generator = random.Random(7)
    starts = [MAY_1, 0, -86_400_000 * 3 - 1, 951_782_400_000, -50_000_000_000_000]
    instants: list[float] = [
        start + generator.choice([-1, 0, 1]) * generator.randrange(0, 4 * 86_400_000)
        for start in starts
        for _ in range(300)
    ]
    instants += [MAY_1 + 0.25, MAY_1 + 0.75, -0.5, 3_599_999, 3_600_000, 59_999, 60_000]
    epoch = EpochFormat(spec)
    for millis in instants:
        expected = (EPOCH + timedelta(milliseconds=millis)).strftime(spec)
        assert epoch(millis) == expected, millis
    assert len(epoch._texts) <= 8


def test_out_of_a_datetimes_range_the_error_is_the_datetimes() -> None:
    with pytest.raises(OverflowError):
        EpochFormat("%Y%m%d")(300_000_000_000_000)


def test_a_day_spec_formats_each_day_once() -> None:
    template = Template("{event_time:%Y%m%d}")
    for minute in range(3 * 1440):  # three days, one record a minute
        template.render({}, WriterContext(timestamp=MAY_1 + minute * 60_000))
    epoch = template._placeholders[0].epoch
    assert epoch is not None
    assert sorted(epoch._texts.values()) == ["20240501", "20240502", "20240503", "20240504"]
