"""The per-subtask SinkWriter and registry, over the in-memory file writer (no Flink, no service)."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import Any

import pytest

from pyflink_gcp.core import (
    FailureHandler,
    RecordRejectedError,
    ResolverError,
    SerializerError,
    SubtaskInfo,
    UnroutableRecord,
    WriteError,
)
from pyflink_gcp.core.errors import CreationLimitExceededError
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.core.writer import DestinationWriter
from tests.support.fakes import FileDestination, FileSink, FileWriter, FileWriterFactory


def open_writer(tmp_path, resolver, serializer=None, **options) -> SinkWriter:
    sink = FileSink(str(tmp_path), resolver, serializer, **options)
    writer = SinkWriter(sink._sink_config())
    writer.open(SubtaskInfo("file-sink"))
    return writer


def lines(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def by_region(record, ctx):
    return FileDestination.of(record["region"])


def test_writers_are_created_lazily_and_flushed_together(tmp_path):
    writer = open_writer(tmp_path, by_region)
    assert len(writer.registry) == 0
    for i in range(10):
        writer.write({"region": f"r{i % 3}", "i": i})
    assert len(writer.registry) == 3
    assert lines(tmp_path, "r0") == []  # nothing durable before the flush
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "r0")] == [0, 3, 6, 9]
    assert all(w.is_clean for w in writer.registry)


def test_serializer_none_skips_but_the_record_was_resolved(tmp_path):
    resolved = []

    def resolver(record, ctx):
        resolved.append(record["i"])
        return by_region(record, ctx)

    writer = open_writer(tmp_path, resolver, lambda r, c: None if r["i"] % 2 else r)
    for i in range(4):
        writer.write({"region": "a", "i": i})
    writer.flush()
    assert resolved == [0, 1, 2, 3]
    assert writer.skipped == 2 and [r["i"] for r in lines(tmp_path, "a")] == [0, 2]


def test_resolver_errors_name_sink_resolver_and_record(tmp_path):
    writer = open_writer(tmp_path, lambda r, c: None)
    with pytest.raises(ResolverError) as err:
        writer.write({"id": 42})
    assert str(err.value) == (
        "sink 'file-sink': destination resolver tests.unit.core.test_sink_writer."
        "test_resolver_errors_name_sink_resolver_and_record.<locals>.<lambda> returned None for "
        "record {'id': 42}; every record needs a FileDestination"
    )

    def boom(record, ctx):
        raise KeyError("region")

    writer = open_writer(tmp_path, boom)
    with pytest.raises(ResolverError) as err:
        writer.write({"id": 43})
    assert str(err.value) == (
        "sink 'file-sink': destination resolver tests.unit.core.test_sink_writer."
        "test_resolver_errors_name_sink_resolver_and_record.<locals>.boom raised KeyError: "
        "'region' for record {'id': 43}"
    )


def test_serializer_errors_name_the_serializer(tmp_path):
    writer = open_writer(tmp_path, by_region, lambda r, c: r["missing"])
    with pytest.raises(SerializerError, match="sink 'file-sink': serializer .* raised KeyError"):
        writer.write({"region": "a"})


def test_unroutable_record_is_refused_by_sinks_that_do_not_accept_it(tmp_path):
    writer = open_writer(tmp_path, lambda r, c: UnroutableRecord.of(b"x", "unknown"))
    with pytest.raises(
        ResolverError, match="returned an UnroutableRecord, which this sink does not accept"
    ):
        writer.write({"id": 1})


def test_unroutable_record_goes_to_the_failure_handler_when_accepted(tmp_path):
    writer = open_writer(
        tmp_path,
        lambda r, c: UnroutableRecord.of(b"x", "unknown tenant"),
        failure_handler=FailureHandler.log_and_drop(),
    )
    writer._factory.accepts_unroutable = True
    writer.write({"id": 1})
    writer.flush()
    assert writer.router.dropped == 1 and len(writer.registry) == 0


def test_an_unroutable_record_from_the_serializer_goes_to_the_failure_handler(tmp_path):
    """A sink without a resolver (Spanner) learns from its serializer that a record names no
    valid destination; it creates no writer state either."""
    writer = open_writer(
        tmp_path,
        by_region,
        lambda r, c: UnroutableRecord.of(b"x", "no table") if r["region"] is None else r,
        failure_handler=FailureHandler.log_and_drop(),
    )
    writer._factory.accepts_unroutable = True
    writer.write({"region": None})
    writer.write({"region": "eu"})
    writer.flush()
    assert writer.router.dropped == 1 and writer.records_written == 1
    assert [w.destination.resource_name for w in writer.registry] == ["files/eu"]


def test_rejected_records_follow_the_failure_handler(tmp_path):
    writer = open_writer(tmp_path, by_region, failure_handler=FailureHandler.log_and_drop())
    writer.write({"region": "a", "reject": True})
    writer.write({"region": "a", "i": 1})
    writer.flush()
    assert writer.router.dropped == 1 and [r["i"] for r in lines(tmp_path, "a")] == [1]

    writer = open_writer(tmp_path, by_region)
    writer.write({"region": "b", "reject": True})
    with pytest.raises(RecordRejectedError, match="destination 'files/b' rejected"):
        writer.flush()


def test_idle_writers_are_evicted_after_a_flush_and_recreated(tmp_path):
    writer = open_writer(tmp_path, by_region, idle_timeout_s=0.0)
    writer.write({"region": "a", "i": 0})
    writer.flush()
    assert len(writer.registry) == 0 and writer.registry.evicted == 1
    writer.write({"region": "a", "i": 1})
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "a")] == [0, 1]
    assert writer.registry.created == 2


def test_the_longest_flush_is_kept_when_later_ones_are_shorter(tmp_path, monkeypatch):
    from pyflink_gcp.core import sink_writer

    writer = open_writer(tmp_path, by_region)
    now = [100.0]
    monkeypatch.setattr(sink_writer.time, "monotonic", lambda: now[0])
    real_flush = FileWriter.flush

    for took in (0.010, 0.250, 0.020):

        def slow_flush(self, took=took):
            now[0] += took  # the flush's own time, as the clock sees it
            return real_flush(self)

        monkeypatch.setattr(FileWriter, "flush", slow_flush)
        writer.write({"region": "a", "i": 0})
        writer.flush()
    assert round(writer.last_flush_s, 3) == 0.020
    assert round(writer.max_flush_s, 3) == 0.250


class _Counter:
    def __init__(self):
        self.value = 0

    def inc(self, n=1):
        self.value += n


class _Group:
    def __init__(self):
        self.groups = {}
        self.counters = {}

    def add_group(self, key, value):
        return self.groups.setdefault((key, value), _Group())

    def counter(self, name):
        return self.counters.setdefault(name, _Counter())


def test_per_destination_metrics_count_records_bytes_and_errors(tmp_path):
    from tests.support.fakes import FileSink

    sink = FileSink(
        str(tmp_path),
        by_region,
        per_destination_metrics=True,
        failure_handler=FailureHandler.log_and_drop(),
    )
    writer = SinkWriter(sink._sink_config())
    group = _Group()
    writer.open(SubtaskInfo("file-sink"), group)
    for i in range(3):
        writer.write({"region": "a", "i": i})
    writer.write({"region": "a", "reject": True})
    writer.flush()
    metrics = group.groups[("destination", "files_a")]  # the metric identifier of files/a
    assert metrics.counters["records"].value == 4
    assert (
        metrics.counters["bytes"].value
        == writer.registry.get(FileDestination.of("a")).bytes_accepted
    )
    assert metrics.counters["errors"].value == 1


def test_a_schema_error_without_the_sinks_name_gets_it(tmp_path):
    def serializer(record, ctx):
        raise SerializerError("the payload function returned dict, expected bytes")

    writer = open_writer(tmp_path, by_region, serializer)
    with pytest.raises(SerializerError) as err:
        writer.write({"region": "a"})
    assert str(err.value) == (
        "sink 'file-sink': the payload function returned dict, expected bytes"
    )


def test_start_sends_hands_over_without_making_anything_durable(tmp_path):
    """An ordinary bundle end under checkpoint markers: each dirty writer's start_flush, no wait."""
    writer = open_writer(tmp_path, by_region)
    for i in range(4):
        writer.write({"region": f"r{i % 2}", "i": i})
    writer.start_sends()
    events = [json.loads(x) for x in (tmp_path / "_events.jsonl").read_text().splitlines()]
    assert sorted(e["destination"] for e in events if e["event"] == "start") == ["r0", "r1"]
    assert lines(tmp_path, "r0") == [] and writer.flushes == 0
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "r1")] == [1, 3]
    writer.start_sends()  # clean writers are skipped
    events = [json.loads(x) for x in (tmp_path / "_events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "start" for e in events) == 4  # two here, two inside the flush


def test_marked_writer_waits_at_markers_and_after_long_markerless_spells(tmp_path):
    """Under markers an ordinary bundle end only sends, unless no marker came for a long time."""
    from pyflink_gcp.core import operators

    sink = FileSink(str(tmp_path), by_region)
    function = operators.MarkedWriterProcessFunction(sink._sink_config())
    writer = function._writer = open_writer(tmp_path, by_region)
    writer.write({"region": "a", "i": 0})
    function._on_bundle_end()
    assert lines(tmp_path, "a") == []  # handed over, not waited for
    function.process_element((operators.MARKER_TAG, 3), None)
    assert [r["i"] for r in lines(tmp_path, "a")] == [0] and function.markers == 1
    writer.write({"region": "a", "i": 1})
    writer.flushed_at -= operators.MARKERLESS_FLUSH_S + 1
    function._on_bundle_end()
    assert [r["i"] for r in lines(tmp_path, "a")] == [0, 1]


# -- send_due: bundle ends under checkpoint markers ------------------------------------------


class AgedWriter(FileWriter):
    """A FileWriter whose open batch has an age, like the services' writers."""

    def __init__(self, destination, factory):
        super().__init__(destination, factory)
        self.since = math.inf
        self.started_on: list[str] = []

    def write(self, element, record):
        if not self._buffer:
            self.since = time.monotonic()
        super().write(element, record)

    def start_flush(self):
        self.started_on.append(threading.current_thread().name)
        self.since = math.inf
        super().start_flush()

    @property
    def unsent_since(self):
        return self.since

    @property
    def unsent_records(self):
        return 0 if self.since == math.inf else len(self._buffer)


class AgedFactory(FileWriterFactory):
    def create_writer(self, destination):
        return AgedWriter(destination, self)


def aged_writer(tmp_path, **options) -> SinkWriter:
    sink = FileSink(str(tmp_path), by_region, **options)
    config = sink._sink_config()
    config.factory = AgedFactory(str(tmp_path))
    writer = SinkWriter(config)
    writer.open(SubtaskInfo("file-sink"))
    return writer


def writers_by_name(writer):
    return {w.destination.short: w for w in writer.registry}


def test_a_bundle_end_under_markers_sends_only_the_batches_that_are_due(tmp_path):
    writer = aged_writer(tmp_path, max_buffer_time_ms=1_000)
    assert (writer.due_after_s, writer.tick_s) == (1.0, 0.5)
    writer.write({"region": "old", "i": 0})
    writer.write({"region": "young", "i": 1})
    by_name = writers_by_name(writer)
    by_name["old"].since -= 1.1
    writer.send_due()
    assert len(by_name["old"].started_on) == 1 and by_name["young"].started_on == []
    assert writer.batches_held == 1
    writer.flush()  # the marker's flush sends and waits for everything, young or not
    assert [r["i"] for r in lines(tmp_path, "young")] == [1]
    assert len(by_name["young"].started_on) == 1
    writer.close()


def test_open_batches_over_max_buffered_records_are_sent_oldest_first(tmp_path):
    writer = aged_writer(tmp_path, max_buffer_time_ms=60_000, max_buffered_records=4)
    for i in range(6):
        writer.write({"region": f"r{i % 3}", "i": i})  # two records each, none due
    by_name = writers_by_name(writer)
    by_name["r1"].since -= 2
    by_name["r2"].since -= 1
    writer.send_due()
    # Six records held, four allowed: the oldest batch (r1) goes, then r0 and r2 fit.
    assert [n for n, w in sorted(by_name.items()) if w.started_on] == ["r1"]
    writer.close()


def test_a_due_batch_is_sent_between_bundles_when_no_record_comes(tmp_path):
    """PyFlink ends no bundle without records: the background thread sends what came due."""
    writer = aged_writer(tmp_path, max_buffer_time_ms=40)
    writer.write({"region": "a", "i": 0})
    writer.send_due()  # young: held open
    held = writers_by_name(writer)["a"]
    assert held.started_on == []
    deadline = time.monotonic() + 5
    while not held.started_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.started_on and held.started_on[0].startswith("file-sink-0-due-sends")
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "a")] == [0]
    writer.close()


def test_the_background_thread_leaves_the_writers_alone_during_a_bundle(tmp_path):
    writer = aged_writer(tmp_path, max_buffer_time_ms=20)
    writer.write({"region": "a", "i": 0})
    writer.send_due()
    writer.write({"region": "b", "i": 1})  # a bundle starts: the processing thread holds on
    time.sleep(0.2)
    # "a" may have been sent before the bundle began; "b", written in it, was not.
    assert writers_by_name(writer)["b"].started_on == []
    writer.send_due()
    assert writers_by_name(writer)["b"].started_on == ["MainThread"]
    writer.close()


def test_an_error_of_a_background_send_fails_the_next_record(tmp_path):
    writer = aged_writer(tmp_path, max_buffer_time_ms=20)
    writer.write({"region": "a", "i": 0})
    failing = writers_by_name(writer)["a"]

    def boom():
        raise WriteError("sink 'file-sink': publishing failed")

    failing.start_flush = boom
    writer.send_due()
    deadline = time.monotonic() + 5
    while writer._background_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(WriteError, match="publishing failed"):
        writer.write({"region": "b", "i": 1})
    writer.close()


def test_a_marked_bundle_end_sends_due_batches_and_a_markerless_spell_flushes(tmp_path):
    from pyflink_gcp.core import operators

    sink = FileSink(str(tmp_path), by_region)
    function = operators.MarkedWriterProcessFunction(sink._sink_config())
    writer = function._writer = aged_writer(tmp_path, max_buffer_time_ms=60_000)
    writer.write({"region": "a", "i": 0})
    function._on_bundle_end()
    assert writers_by_name(writer)["a"].started_on == [] and writer.batches_held == 1
    writer.flushed_at -= operators.MARKERLESS_FLUSH_S + 1
    function._on_bundle_end()
    assert [r["i"] for r in lines(tmp_path, "a")] == [0]
    writer.close()


class _LateBytes(DestinationWriter[FileDestination]):
    """A writer that learns its bytes only when it sends (like BigQuery's, which encodes its
    rows on a sender thread): nothing at write, everything at flush."""

    def __init__(self, destination: FileDestination) -> None:
        super().__init__(destination)
        self._held = 0

    def write(self, element: Any, record: Any) -> None:
        self._held += 10

    def flush(self) -> list[Any]:
        self.bytes_accepted += self._held
        self._held = 0
        return []

    @property
    def is_clean(self) -> bool:
        return not self._held


def test_bytes_a_writer_learns_at_its_flush_reach_the_metrics_and_the_summary(
    tmp_path, caplog
) -> None:
    from tests.support.fakes import FileSink

    sink = FileSink(str(tmp_path), by_region, per_destination_metrics=True, idle_timeout_s=0.0)
    config = sink._sink_config()
    config.factory.create_writer = _LateBytes  # type: ignore[method-assign]
    writer = SinkWriter(config)
    group = _Group()
    writer.open(SubtaskInfo("file-sink"), group)
    for i in range(3):
        writer.write({"region": "a", "i": i})
    writer.flush()  # counted at the flush; then the idle writer is evicted
    writer.write({"region": "a", "i": 3})
    writer.flush()
    metrics = group.groups[("destination", "files_a")]
    assert metrics.counters["records"].value == 4
    assert metrics.counters["bytes"].value == 40
    with caplog.at_level(logging.INFO, logger="pyflink_gcp.writer"):
        writer.close()
    assert (
        "file-sink: subtask 0 closed: 4 records written (40 bytes counted) through 2 "
        "destination writers opened, 0 skipped by the serializer, 0 dropped, 0 dead-lettered"
    ) in caplog.text


# -- carried records (max_carry_time) --------------------------------------------------------


def test_carried_records_wait_across_markers_and_come_back_after_a_restore(tmp_path):
    """A marker flushes the writers but not the carried records; those go into the operator's
    state, and a writer restored from it carries them again; the end of input sends them."""
    import base64
    import struct

    from pyflink_gcp.core import operators
    from pyflink_gcp.core.carry import CarrySettings, decode_element

    carry = CarrySettings(max_carry_time_s=3600.0)
    sink = FileSink(str(tmp_path), by_region, carry=carry)
    function = operators.MarkedWriterProcessFunction(sink._sink_config())
    writer = function._writer = open_writer(tmp_path, by_region, carry=carry)
    for i in range(4):
        writer.write({"region": f"r{i % 2}", "i": i})
    function._on_bundle_end()
    out = function.process_element((operators.MARKER_TAG, 1), None)
    assert lines(tmp_path, "r0") == [] and lines(tmp_path, "r1") == []  # carried, not sent
    assert writer.carried is not None and writer.carried.records == 4
    [element] = out
    chunk, released, payload = decode_element(element)
    assert (chunk, released) == (0, [])

    # The operator restores the chunk into a new attempt's writer.
    parameter = base64.b64encode(struct.pack(">q", chunk) + payload).decode()
    function = operators.MarkedWriterProcessFunction(sink._sink_config())
    restored = function._writer = open_writer(tmp_path, by_region, carry=carry)
    assert restored.restore_carried(parameter) == 4
    restored.write({"region": "r0", "i": 4})
    function.process_element((operators.MARKER_TAG, operators.END_OF_INPUT), None)
    assert [r["i"] for r in lines(tmp_path, "r0")] == [0, 2, 4]
    assert [r["i"] for r in lines(tmp_path, "r1")] == [1, 3]


def test_restored_records_are_written_when_the_sink_no_longer_carries(tmp_path):
    """A savepoint of a carrying job, restored into one that does not carry: nothing is lost."""
    import base64
    import pickle
    import struct

    parameter = base64.b64encode(
        struct.pack(">q", 7)
        + pickle.dumps([(FileDestination.of("r0"), [{"region": "r0", "i": 9}])])
    ).decode()
    writer = open_writer(tmp_path, by_region)
    assert writer.restore_carried(parameter) == 1
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "r0")] == [9]


def test_carried_batches_go_at_a_bundle_end_once_due(tmp_path):
    from pyflink_gcp.core.carry import CarrySettings

    writer = open_writer(tmp_path, by_region, carry=CarrySettings(max_carry_time_s=0.001))
    writer.write({"region": "a", "i": 0})
    time.sleep(0.01)
    writer.send_due()
    assert writer.carried is not None and writer.carried.records == 0
    writer.flush()
    assert [r["i"] for r in lines(tmp_path, "a")] == [0]


def test_a_restored_records_serializer_errors_read_as_a_written_ones(tmp_path):
    """The same errors for a record written and one taken back from a restored checkpoint: a
    schema function's SinkError keeps its type and gets the sink's name; anything else is a
    SerializerError naming the serializer and the restored record."""
    import base64
    import pickle
    import struct

    def parameter(record):
        payload = pickle.dumps([(FileDestination.of("r0"), [record])])
        return base64.b64encode(struct.pack(">q", 0) + payload).decode()

    def serializer(record, ctx):
        if record["i"] == 0:
            raise CreationLimitExceededError("a schema function's error")
        raise ValueError("bad row")

    writer = open_writer(tmp_path, by_region, serializer)
    with pytest.raises(CreationLimitExceededError) as err:
        writer.restore_carried(parameter({"region": "r0", "i": 0}))
    assert str(err.value) == "sink 'file-sink': a schema function's error"
    with pytest.raises(SerializerError, match="raised ValueError: bad row for restored record"):
        writer.restore_carried(parameter({"region": "r0", "i": 1}))
