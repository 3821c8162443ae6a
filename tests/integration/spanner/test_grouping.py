"""The grouping writer against the emulator: sorted commits within the limits, commit options."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.spanner import Mutation, SpannerWriterOptions
from pyflink_gcp.spanner.grouping import GroupingSpannerWriter
from tests.integration.spanner.support import create_tables, open_writer, query, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tables(stack: Any) -> tuple[str, str]:
    plain, composite = unique("ItGroupA"), unique("ItGroupB")
    create_tables(
        [
            f"CREATE TABLE {plain} (id INT64 NOT NULL, v STRING(16)) PRIMARY KEY (id)",
            f"CREATE TABLE {composite} (region STRING(8) NOT NULL, num INT64 NOT NULL, "
            "v STRING(16)) PRIMARY KEY (region, num)",
        ]
    )
    return plain, composite


def test_grouped_commits_with_a_commit_delay_write_every_row(tables: tuple[str, str]) -> None:
    plain, composite = tables
    options = (
        SpannerWriterOptions.builder()
        .grouping_factor(20)
        .max_rows_per_commit(25)
        .max_commit_delay(timedelta(milliseconds=20))
        .max_cumulative_backoff(timedelta(seconds=30))
        .build()
    )
    factory, writer = open_writer(options)
    try:
        assert isinstance(writer, GroupingSpannerWriter)
        keys = list(range(600))
        random.Random(5).shuffle(keys)
        for k in keys:
            if k % 2:
                writer.write(Mutation.insert_or_update(plain, {"id": k, "v": "one"}), k)
            else:
                row = {"region": f"r{k % 3}", "num": k, "v": "one"}
                writer.write(Mutation.insert_or_update(composite, row), k)
        for k in keys[:100]:  # the same rows again: the later write wins
            if k % 2:
                writer.write(Mutation.insert_or_update(plain, {"id": k, "v": "two"}), k)
            else:
                writer.write(Mutation.delete(composite, (f"r{k % 3}", k)), k)
        assert writer.flush() == []
        assert writer.is_clean
        assert writer.commits == -(-700 // 25)
    finally:
        writer.close()
        factory.close()
    later = set(keys[:100])
    got = dict(query(f"SELECT id, v FROM {plain}"))
    assert got == {k: "two" if k in later else "one" for k in range(1, 600, 2)}
    got_b = {num for _, num in query(f"SELECT region, num FROM {composite}")}
    assert got_b == {k for k in range(0, 600, 2) if k not in later}
