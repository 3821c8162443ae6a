"""The options tables of ``docs/sql.md``, generated from the option list so they cannot drift.

``docs/sql.md`` holds one block per connector between ``<!-- options:gcp-pubsub -->`` and
``<!-- /options -->``; :func:`render` replaces each block's body with :func:`options_table` of
that connector, and a unit test checks that the file is what :func:`render` makes of it.
Regenerate after changing :mod:`pyflink_gcp.table.options`::

    python -m pyflink_gcp.table.docs docs/sql.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pyflink_gcp.table.option_model import TableOption
from pyflink_gcp.table.options import CONNECTORS

_BLOCK = re.compile(r"(<!-- options:(?P<id>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /options -->)", re.S)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _kind(option: TableOption) -> str:
    if option.kind == "enum":
        return " / ".join(f"`{c}`" for c in option.choices)
    if option.kind == "int":
        low, high = option.minimum, option.maximum
        if low is not None and high is not None:
            return f"int in [{low}, {high}]"
        return f"int ≥ {low}" if low is not None else "int"
    if option.kind == "duration":
        return "duration" if option.maximum is None else f"duration ≤ {option.maximum}ms"
    if option.kind == "string" and option.maximum is not None:
        return f"string of {option.minimum or 0} to {option.maximum} bytes"
    return option.kind


def _required(option: TableOption) -> str:
    if option.required:
        return "yes"
    if option.required_when:
        key, value = option.required_when
        return f"when `{key}` = `{value}`"
    return ""


def options_table(identifier: str) -> str:
    """The Markdown table of a connector's options: key, required, kind, default, what it does."""
    lines = [
        "| key | required | kind | default | what it does |",
        "|---|---|---|---|---|",
    ]
    for option in CONNECTORS[identifier].options:
        default = f"`{option.default}`" if option.default is not None else ""
        lines.append(
            f"| `{option.key}` | {_required(option)} | {_cell(_kind(option))} | {default} | "
            f"{_cell(option.description)} |"
        )
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``text`` with every options block regenerated.

    Raises:
        KeyError: A block names an unknown connector.
    """
    return _BLOCK.sub(lambda m: m.group(1) + options_table(m.group("id")) + m.group(4), text)


def blocks(text: str) -> list[str]:
    """The connectors whose options blocks ``text`` holds, in order."""
    return [m.group("id") for m in _BLOCK.finditer(text)]


def main(argv: list[str]) -> int:
    """Rewrite the given Markdown files in place."""
    for name in argv:
        path = Path(name)
        path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
