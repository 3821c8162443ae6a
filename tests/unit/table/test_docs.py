"""docs/sql.md's options tables are the option list's: generated, and checked here so they
cannot drift."""

from __future__ import annotations

from pathlib import Path

from pyflink_gcp.table.docs import blocks, options_table, render
from pyflink_gcp.table.options import CONNECTORS

SQL_MD = Path(__file__).resolve().parents[3] / "docs" / "sql.md"


def test_every_connector_has_its_table_in_docs_sql_md_and_it_is_the_generated_one():
    text = SQL_MD.read_text()
    assert blocks(text) == list(CONNECTORS)
    assert render(text) == text, "regenerate: python -m pyflink_gcp.table.docs docs/sql.md"


def test_a_table_lists_every_key_with_its_default_and_requirement():
    table = options_table("gcp-pubsub").splitlines()
    keys = [line.split("|")[1].strip().strip("`") for line in table[2:]]
    assert keys == [o.key for o in CONNECTORS["gcp-pubsub"].options]
    topic = next(line for line in table if line.startswith("| `topic` |"))
    assert "| yes | template |" in topic
    dead_letter = next(line for line in table if line.startswith("| `dead-letter.topic` |"))
    assert "when `failure-handler` = `dead-letter`" in dead_letter
    assert any("| `fail` / `drop` / `dead-letter` | `fail` |" in line for line in table)


def test_a_stale_table_is_rewritten():
    stale = "x\n<!-- options:gcp-spanner -->\n| old |\n<!-- /options -->\ny\n"
    assert render(stale) == (
        "x\n<!-- options:gcp-spanner -->\n"
        + options_table("gcp-spanner")
        + "<!-- /options -->\ny\n"
    )
