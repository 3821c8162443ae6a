"""BigtableSink inside real PyFlink MiniCluster jobs, read back from the emulator with ReadRows."""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    CreateDisposition,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
    TableDestination,
)
from pyflink_gcp.core import FailureHandler
from tests.e2e.bigtable.helpers import (
    BASE_MS,
    DAY_MS,
    PROJECT,
    DayTableResolver,
    RecordingFactory,
    day_of,
    event_entry,
    read_events,
)
from tests.integration.bigtable.support import (
    BigtableProxy,
    column_families,
    list_tables,
    read_table,
    unique,
)
from tests.support.dead_letters import FileDeadLetterQueue
from tests.support.jobs import FailOnce, make_env, pause, record_stream
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

PHASE = 300  # records per day phase: each table is idle for two phases at a time


def slow_event(i: int, until: str | None = None) -> dict[str, Any]:
    """Events cycle through three days, PHASE records per day, ~3 ms apart until the file
    ``until`` (the injected failure's marker) exists."""
    pause(0.003, until)
    return {"i": i, "ts": BASE_MS + ((i // PHASE) % 3) * DAY_MS + i}


def test_day_tables_created_idle_batchers_evicted_and_a_failure_loses_nothing(
    stack: Any, tmp_path: Any
) -> None:
    instance = unique("days-")
    events = str(tmp_path / "events.jsonl")
    marker = str(tmp_path / "failed")
    n = 4_000
    sink = (
        BigtableSink.builder()
        .set_destination_resolver(DayTableResolver(instance, "events"))
        .set_serializer(event_entry)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(
            TableCreateOptions(column_families={"cf": 1, "meta": timedelta(days=7)})
        )
        .set_writer_options(
            BigtableWriterOptions.builder()
            .idle_timeout(timedelta(seconds=0.5))
            .max_buffer_time(timedelta(milliseconds=200))
            .max_created_destinations(5)
            .batch_max_entries(100)
            .build()
        )
        .build()
    )
    sink._config.factory = RecordingFactory.replacing(sink.writer_factory, events)
    # Small bundles upstream: the slow map would otherwise hold each checkpoint barrier (and so
    # the sink's flush) for a 1,000-record bundle, about 3 s.
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=500,
        extra={"python.fn-execution.bundle.size": "50", **failover.conf()},
    )
    (
        record_stream(env, n, partial(slow_event, until=marker))
        .map(FailOnce(marker, lambda e: e["i"] == 3_100, after_checkpoint=failover.checkpoints))
        .sink_to(sink)
    )
    env.execute("bigtable-day-tables")
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    days = sorted({day_of(BASE_MS + d * DAY_MS) for d in range(3)})
    assert sorted(list_tables(instance)) == [f"events_{d}" for d in days]
    for day in days:
        assert column_families(instance, f"events_{day}") == {
            "cf": {"max_num_versions": 1},
            "meta": {"max_age": "604800s"},
        }

    found: Counter[int] = Counter()
    for day in days:
        for key, cells in read_table(instance, f"events_{day}").items():
            i = int(key[1:])
            ts = BASE_MS + ((i // PHASE) % 3) * DAY_MS + i
            assert day_of(ts) == day, f"row {key!r} in the table of {day}"
            assert cells == {
                ("cf", b"value"): [(ts * 1000, str(i).encode())],
                ("meta", b"day"): [(ts * 1000, day.encode())],
            }
            found[i] += 1
    lost = sorted(set(range(n)) - set(found))
    assert not lost, f"lost {len(lost)} rows, e.g. {lost[:10]}"
    assert all(c == 1 for c in found.values())

    log = read_events(events)
    evicted_and_rebuilt = set()
    for subtask, attempt in {(e["subtask"], e["attempt"]) for e in log}:
        closed: set[str] = set()
        for e in (e for e in log if (e["subtask"], e["attempt"]) == (subtask, attempt)):
            if e["event"] == "close":
                closed.add(e["table"])
            elif e["event"] == "create" and e["table"] in closed:
                evicted_and_rebuilt.add(e["table"])
    assert evicted_and_rebuilt, f"no batcher was evicted and rebuilt: {log}"
    sent = sum(e["entries"] for e in log if e["event"] == "stats")
    # Each subtask reads half of the sequence; a restarted one must resume past its start.
    restarted = [e for e in log if e["event"] == "stats" and e["attempt"] > 0]
    assert restarted, "no subtask restarted"
    for stats in restarted:
        assert stats["entries"] < n / 2, f"subtask {stats['subtask']} replayed from the start"
    print(
        f"day tables: {n} events, 0 lost, {sent - n} entries written twice after the restart, "
        f"{len(evicted_and_rebuilt)} tables' batchers evicted and rebuilt"
    )


#: Rows of 1,000 cells first: 150,000 cells, half as many again as one MutateRows request may
#: carry. The source splits its range into contiguous halves, so they all reach one subtask.
WIDE = 150


def wide_or_narrow(i: int) -> dict[str, Any]:
    return {"i": i, "wide": i < WIDE}


def wide_entry(record: dict[str, Any], context: Any) -> RowMutationEntry:
    i = record["i"]
    if record["wide"]:
        cells = [SetCell("cf", b"c%04d" % c, b"%d" % i, 1_000) for c in range(1_000)]
        return RowMutationEntry(b"w%04d" % i, cells)
    family = "nope" if i % 50 == 0 else "cf"
    return RowMutationEntry(b"n%04d" % i, [SetCell(family, b"v", b"%d" % i, 1_000)])


def test_batches_over_100k_cells_are_split_and_bad_families_dead_lettered(
    stack: Any, tmp_path: Any
) -> None:
    instance = unique("wide-")
    dead = str(tmp_path / "dead.jsonl")
    n = WIDE + 600  # then 600 one-cell rows (12 of them to a missing family)
    with BigtableProxy() as proxy:
        sink = (
            BigtableSink.builder()
            .set_endpoint("http://" + proxy.host)
            .set_destination_resolver(lambda r, c: TableDestination.of(PROJECT, instance, "wide"))
            .set_serializer(wide_entry)
            .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
            .set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
            .set_failure_handler(
                FailureHandler.send_to_dead_letter_queue(FileDeadLetterQueue(dead))
            )
            .set_writer_options(
                BigtableWriterOptions.builder()
                # One batch per subtask until the end of input, but for the mutation limit.
                .batch_max_bytes(1 << 30)
                .max_buffer_time(timedelta(seconds=60))
                .build()
            )
            .build()
        )
        env = make_env(parallelism=2, checkpoint_ms=None)
        record_stream(env, n, wide_or_narrow).sink_to(sink)
        env.execute("bigtable-wide-rows")
        requests = list(proxy.requests)
        rejected = proxy.rejected

    assert rejected == 0
    assert max(m for _, m in requests) == 100_000, requests
    assert sum(m for _, m in requests) == WIDE * 1_000 + 600
    rows = read_table(instance, "wide")
    wide = {k: v for k, v in rows.items() if k.startswith(b"w")}
    assert len(wide) == WIDE and all(len(cells) == 1_000 for cells in wide.values())
    bad = {b"n%04d" % i for i in range(WIDE, n) if i % 50 == 0}
    assert {k for k in rows if k.startswith(b"n")} == {b"n%04d" % i for i in range(WIDE, n)} - bad
    letters = read_events(dead)
    assert {d["attributes"]["row-key"].encode() for d in letters} == bad
    assert all('unknown family "nope"' in d["reason"] for d in letters)
    assert all(d["destination"].endswith(f"/instances/{instance}/tables/wide") for d in letters)


def bad_serializer(record: int, context: Any) -> Any:
    return {"row": record}


@pytest.mark.parametrize("case", ["wrong-type", "missing-table", "creation-bound"])
def test_bad_input_fails_the_job_with_a_clear_error(stack: Any, case: str) -> None:
    instance = unique("bad-")
    builder = BigtableSink.builder().set_sink_name("bad-input")
    if case == "wrong-type":
        builder.set_destination_resolver(
            lambda r, c: TableDestination.of(PROJECT, instance, "t")
        ).set_serializer(bad_serializer).set_create_disposition(
            CreateDisposition.CREATE_IF_NEEDED
        ).set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
        expected = [
            "SerializerError: sink 'bad-input': the serializer returned dict",
            f"headed to table 'projects/{PROJECT}/instances/{instance}/tables/t'",
            "expected a RowMutationEntry",
        ]
    elif case == "missing-table":
        builder.set_destination_resolver(
            lambda r, c: TableDestination.of(PROJECT, instance, "absent")
        ).set_serializer(lambda r, c: RowMutationEntry(b"k", SetCell("cf", b"q", b"v")))
        expected = [
            f"DestinationNotFoundError: sink 'bad-input': table 'projects/{PROJECT}/instances/"
            f"{instance}/tables/absent' at ",
            "does not exist, and the sink may not create tables",
        ]
    else:
        builder.set_destination_resolver(
            lambda r, c: TableDestination.of(PROJECT, instance, f"t{r}")
        ).set_serializer(
            lambda r: RowMutationEntry(b"k", SetCell("cf", b"q", b"v"))
        ).set_create_disposition(CreateDisposition.CREATE_IF_NEEDED).set_table_create_options(
            TableCreateOptions(column_families={"cf": 1})
        ).set_writer_options(BigtableWriterOptions.builder().max_created_destinations(3).build())
        expected = [
            "CreationLimitExceededError: sink 'bad-input': creating table",
            "would exceed max_created_destinations=3 per 1h",
            "this subtask created 3 tables in the last",
            "test_bad_input_fails_the_job_with_a_clear_error.<locals>.<lambda> names new tables",
        ]
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 10, lambda i: i).sink_to(builder.build())
    with pytest.raises(Exception) as err:
        env.execute(f"bigtable-bad-{case}")
    text = str(err.value)
    for part in expected:
        assert part in text, f"{part!r} not in the job's error"
    if case == "creation-bound":
        assert len(list_tables(instance)) == 3
