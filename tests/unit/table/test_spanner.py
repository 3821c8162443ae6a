"""gcp-spanner's adapter: upserts into the template's table, and with a primary key the
changelog's deletes as key deletes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.spanner import Mutation
from pyflink_gcp.spanner.options import MAX_COMMIT_DELAY, SpannerWriterOptions
from pyflink_gcp.table.option_model import OptionError
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, DeletedRow, TableInfo
from pyflink_gcp.table.spanner import build_sink

COLUMNS = (
    Column("region", {"root": "VARCHAR", "nullable": False, "sql": "STRING"}),
    Column("id", {"root": "BIGINT", "nullable": False, "sql": "BIGINT"}),
    Column("total", {"root": "BIGINT", "nullable": True, "sql": "BIGINT"}),
)
RAW = {"project": "p", "instance": "inst", "database": "db", "table": "Totals_{region}"}


def _serializer(table: TableInfo):
    sink = build_sink(parse("gcp-spanner", RAW, table.names), table)
    assert str(sink.database) == "projects/p/instances/inst/databases/db"
    return sink._sink_config().serializer


def test_rows_are_upserts_into_their_template_table():
    serialize = _serializer(TableInfo("totals", COLUMNS))
    row = {"region": "eu", "id": 1, "total": 5}
    assert serialize(row, None) == Mutation.insert_or_update("Totals_eu", row)
    unroutable = serialize({**row, "region": None}, None)
    assert isinstance(unroutable, UnroutableRecord)
    assert unroutable.payload == b'{"region":null,"id":1,"total":5}'
    assert "placeholder {region}: the value is missing (None)" in unroutable.reason


def test_a_deleted_row_deletes_its_key():
    serialize = _serializer(TableInfo("totals", COLUMNS, primary_key=("region", "id")))
    deleted = DeletedRow(region="eu", id=1, total=5)
    assert serialize(deleted, None) == Mutation.delete("Totals_eu", ("eu", 1))


def _writer_options(**more: str):
    sink = build_sink(parse("gcp-spanner", {**RAW, **more}, ("region",)), TableInfo("t", COLUMNS))
    return sink._sink_config().factory.options


def test_the_commit_and_grouping_options_reach_the_writer_options():
    defaults = _writer_options()
    assert (defaults.grouping_factor, defaults.grouping) == (1, False)
    assert defaults.max_rows_per_commit is None
    assert defaults.max_commit_delay is None and defaults.max_cumulative_backoff is None
    options = _writer_options(
        **{
            "sink.grouping-factor": "100",
            "sink.max-rows-per-commit": "500",
            "sink.max-mutations-per-commit": "5000",
            "sink.max-commit-bytes": "1000000",
            "sink.commit-timeout": "15s",
            "sink.max-commit-delay": "0ms",
            "sink.max-cumulative-backoff": "2min",
        }
    )
    assert options.grouping
    assert (options.grouping_factor, options.max_rows_per_commit) == (100, 500)
    assert (options.max_mutations_per_commit, options.max_commit_bytes) == (5000, 1_000_000)
    assert options.commit_timeout == timedelta(seconds=15)
    assert options.max_commit_delay == timedelta(0)
    assert options.max_cumulative_backoff == timedelta(minutes=2)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("sink.grouping-factor", "0", "an integer >= 1"),
        ("sink.max-rows-per-commit", "0", "an integer >= 1"),
        ("sink.max-mutations-per-commit", "80001", "an integer in [1, 80000]"),
        ("sink.max-commit-bytes", "100000001", "an integer in [1, 100000000]"),
        (
            "sink.max-commit-delay",
            "soon",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at most 500ms",
        ),
        (
            "sink.max-commit-delay",
            "501ms",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at most 500ms",
        ),
        (
            "sink.max-commit-delay",
            "1s",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at most 500ms",
        ),
        (
            "sink.max-cumulative-backoff",
            "0s",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at least 1ms",
        ),
    ],
)
def test_a_bad_commit_option_names_itself_and_what_is_expected(key, value, expected):
    with pytest.raises(OptionError) as error:
        parse("gcp-spanner", {**RAW, key: value}, ("region",))
    assert str(error.value) == (
        f"Invalid value for option '{key}' of connector 'gcp-spanner': expected {expected}, "
        f"got '{value}'."
    )


def test_the_sql_commit_delay_limit_is_spanners_and_the_limit_itself_is_taken():
    option = CONNECTORS["gcp-spanner"].option("sink.max-commit-delay")
    assert option.maximum == MAX_COMMIT_DELAY // timedelta(milliseconds=1)
    assert _writer_options(**{"sink.max-commit-delay": "500ms"}).max_commit_delay == timedelta(
        milliseconds=500
    )


def test_a_commit_delay_over_spanners_limit_is_refused_by_the_writer_options_too():
    # A payload built by hand skips the planner's check: the DataStream options still refuse it.
    with pytest.raises(ConfigurationError, match=r"max_commit_delay must be at most 500 ms"):
        SpannerWriterOptions.builder().max_commit_delay(timedelta(milliseconds=501)).build()
