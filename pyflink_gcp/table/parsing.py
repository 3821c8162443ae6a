"""Parsing a DDL's options on the worker: the same rules and messages as the Java factories.

The Java factory validates every option when the statement is planned; the Python worker parses
them again with the same list (:mod:`pyflink_gcp.table.options`) so that an adapter never runs
on options Java did not see (a payload built by hand), and gets typed values: ints, booleans,
``timedelta`` s, column tuples. Kept apart from the list itself, which the bridge build loads
by its file path and must stay small and dependency-free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from pyflink_gcp.table.option_model import OptionError, TableOption
from pyflink_gcp.table.options import CONNECTORS

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _invalid(connector: str, key: str, expected: str, value: str) -> OptionError:
    return OptionError(
        f"Invalid value for option '{key}' of connector '{connector}': expected {expected}, "
        f"got '{value}'."
    )


def parse_duration(text: str) -> timedelta | None:
    """``10s`` as a timedelta; None when ``text`` is no duration of this syntax."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return timedelta(milliseconds=int(match.group(1)) * _UNIT_MS[match.group(2)])


def duration_expected(low: int, high: int | None) -> str:
    """What a ``duration`` option of bounds ``low``..``high`` (milliseconds) expects, as the
    Java factories word it: the syntax, then the bounds that are not the syntax's own."""
    least = f" of at least {low}ms" if low >= 1 else ""
    most = "" if high is None else (f" and at most {high}ms" if least else f" of at most {high}ms")
    return f"a duration such as 500ms, 10s, 5min, 1h or 1d{least}{most}"


def text_expected(low: int, high: int | None) -> str:
    """What a ``string`` option of ``low``..``high`` UTF-8 bytes expects, as Java words it."""
    return (
        f"a text of {low} to {high} bytes"
        if high is not None
        else f"a text of at least {low} bytes"
    )


def distinct_error(connector: str, key: str, other: str, value: str) -> str:
    """The message of two options that must differ and do not, as the Java factories word it."""
    return (
        f"Options '{key}' and '{other}' of connector '{connector}' must differ, both are '{value}'."
    )


def _parse_value(connector: str, option: TableOption, text: str, columns: Sequence[str]) -> Any:
    key, kind = option.key, option.kind
    if kind == "string" and (option.minimum is not None or option.maximum is not None):
        size, least = len(text.encode("utf-8")), option.minimum or 0
        if size < least or (option.maximum is not None and size > option.maximum):
            raise _invalid(connector, key, text_expected(least, option.maximum), text)
    if kind in ("string", "template"):
        return text
    if kind == "int":
        low, high = option.minimum, option.maximum
        bound = (
            f" in [{low}, {high}]"
            if low is not None and high is not None
            else (f" >= {low}" if low is not None else "")
        )
        if not re.fullmatch(r"\s*-?\d+\s*", text):
            raise _invalid(connector, key, f"an integer{bound}", text)
        number = int(text)
        if (low is not None and number < low) or (high is not None and number > high):
            raise _invalid(connector, key, f"an integer{bound}", text)
        return number
    if kind == "bool":
        if text.strip().lower() not in ("true", "false"):
            raise _invalid(connector, key, "true or false", text)
        return text.strip().lower() == "true"
    if kind == "duration":
        duration = parse_duration(text)
        low, high = option.minimum or 0, option.maximum
        if (
            duration is None
            or duration < timedelta(milliseconds=low)
            or (high is not None and duration > timedelta(milliseconds=high))
        ):
            raise _invalid(connector, key, duration_expected(low, high), text)
        return duration
    if kind == "enum":
        if text not in option.choices:
            raise _invalid(connector, key, "one of " + ", ".join(option.choices), text)
        return text
    if kind in ("column", "columns"):
        names = [n.strip() for n in text.split(",")] if kind == "columns" else [text]
        for name in names:
            if name not in columns:
                raise _invalid(
                    connector, key, "a column of the table (" + ", ".join(columns) + ")", name
                )
        return tuple(names) if kind == "columns" else text
    raise OptionError(f"option '{key}' of connector '{connector}' has an unknown kind {kind!r}")


def parse(identifier: str, raw: Mapping[str, str], columns: Sequence[str]) -> dict[str, Any]:
    """The options of a DDL, typed, with the defaults of the unset ones.

    The Java factory already checked all of this at planning time; the worker checks again so
    that the adapter never runs on options Java did not see (a payload built by hand).

    Args:
        identifier: The connector.
        raw: The DDL's options (``connector`` is ignored).
        columns: The table's column names (for ``column`` options).

    Returns:
        Every option key of the connector: its parsed value, or None when unset without default.

    Raises:
        OptionError: An unknown key, a missing required key, or a bad value.
    """
    connector = CONNECTORS.get(identifier)
    if connector is None:
        raise OptionError(f"unknown connector '{identifier}' (known: {', '.join(CONNECTORS)})")
    known = {o.key: o for o in connector.options}
    unknown = sorted(k for k in raw if k != "connector" and k not in known)
    if unknown:
        raise OptionError(
            f"Unsupported options found for '{identifier}': {', '.join(unknown)}. "
            f"Supported options: {', '.join(sorted(known))}."
        )
    missing = sorted(o.key for o in connector.options if o.required and o.key not in raw)
    if missing:
        raise OptionError(f"Missing required options for '{identifier}': {', '.join(missing)}.")
    values: dict[str, Any] = {}
    for option in connector.options:
        text = raw.get(option.key, option.default)
        values[option.key] = (
            None if text is None else _parse_value(identifier, option, text, columns)
        )
    for option in connector.options:
        other_key = option.distinct_from
        if other_key and values[option.key] is not None and values[option.key] == values[other_key]:
            raise OptionError(distinct_error(identifier, option.key, other_key, raw[option.key]))
        if option.required_when and values[option.key] is None:
            other, value = option.required_when
            if values.get(other) == value:
                raise OptionError(
                    f"Option '{option.key}' of connector '{identifier}' is required when "
                    f"'{other}' is '{value}'."
                )
    return values
