"""The per-subtask registry of destination writers: lazy creation, idle eviction, the LRU cap."""

from __future__ import annotations

import json

from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.core.registry import WriterRegistry
from tests.support.fakes import FileDestination, FileWriter, FileWriterFactory


def lines(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_registry_releases_the_least_recently_used_clean_writer_first(tmp_path):
    factory = FileWriterFactory(str(tmp_path))
    factory.open(SubtaskInfo("s"))
    registry = WriterRegistry(factory.create_writer, max_active=2, clock=_Clock())
    a, b, c = (FileDestination.of(x) for x in "abc")
    registry.get(a).write({"i": 1}, None)  # a dirty, least recently used
    wb = registry.get(b)  # b clean
    registry.get(a)  # a becomes most recently used
    registry.get(c)
    assert b not in registry and a in registry and c in registry and wb.closed
    # No clean writer left: the LRU one is flushed first, so nothing is lost.
    registry.get(a).write({"i": 2}, None)
    registry.get(c).write({"i": 3}, None)
    registry.get(b)
    assert a not in registry
    assert [r["i"] for r in lines(tmp_path, "a")] == [1, 2]
    assert registry.max_seen == 2


def test_registry_idle_eviction_skips_dirty_writers(tmp_path):
    clock = _Clock()
    factory = FileWriterFactory(str(tmp_path))
    factory.open(SubtaskInfo("s"))
    registry = WriterRegistry(factory.create_writer, idle_timeout_s=10, clock=clock)
    a, b = FileDestination.of("a"), FileDestination.of("b")
    registry.get(a)
    registry.get(b).write({"i": 1}, None)
    clock.t = 11
    assert registry.evict_idle() == 1
    assert a not in registry and b in registry
    assert isinstance(registry.get(b), FileWriter)


class _Recording(FileWriter):
    """A FileWriter that records when its sends start and when it is waited for."""

    def __init__(self, destination, factory, log):
        super().__init__(destination, factory)
        self.log = log

    def start_flush(self):
        self.log.append(("start", self.destination.short))
        super().start_flush()

    def flush(self):
        self.log.append(("flush", self.destination.short))
        return super().flush()


def recording_registry(tmp_path, max_active, log, **kwargs):
    factory = FileWriterFactory(str(tmp_path))
    factory.open(SubtaskInfo("s"))
    return WriterRegistry(
        lambda d: _Recording(d, factory, log), max_active=max_active, clock=_Clock(), **kwargs
    )


def test_at_the_cap_dirty_writers_are_released_in_batches_without_a_flush_per_record(tmp_path):
    """Records cycling over more destinations than the cap: the releases' sends overlap, and
    only a released writer's slot being needed again waits for it."""
    log: list = []
    registry = recording_registry(tmp_path, 16, log)  # releases two at a time
    names = [f"d{i:02d}" for i in range(40)]
    for i, name in enumerate(names):
        registry.get(FileDestination.of(name)).write({"i": i}, None)
        assert len(registry) + registry.releasing <= 16
    starts = [n for event, n in log if event == "start"]
    flushes = [n for event, n in log if event == "flush"]
    assert starts == names[: len(starts)]  # least recently used first
    assert flushes == starts[: len(flushes)]  # waited for in the order they were sent
    assert len(starts) > len(flushes)  # some sends still in flight, not waited for yet
    # Every slot freed was waited for: a flush per released writer, never two per record.
    assert registry.released == len(flushes)
    registry.finish_releases()
    assert registry.releasing == 0
    for i, name in enumerate(names):
        if name in starts:
            assert [r["i"] for r in lines(tmp_path, name)] == [i]


def test_a_releasing_writer_whose_destination_comes_back_is_used_again(tmp_path):
    log: list = []
    registry = recording_registry(tmp_path, 2, log)
    a, b, c = (FileDestination.of(x) for x in "abc")
    first = registry.get(a)
    first.write({"i": 1}, None)
    registry.get(b).write({"i": 2}, None)
    registry._release(1)  # a starts releasing
    assert registry.releasing == 1 and a not in registry
    assert registry.get(a) is first and registry.revived == 1 and registry.releasing == 0
    registry.get(c)  # at the cap again: b, the least recently used, is released
    assert b not in registry and a in registry
    assert [r["i"] for r in lines(tmp_path, "b")] == [2]


def test_clean_writers_are_released_before_dirty_ones_are_sent(tmp_path):
    log: list = []
    registry = recording_registry(tmp_path, 16, log)
    for i in range(16):
        writer = registry.get(FileDestination.of(f"d{i:02d}"))
        if i % 2:
            writer.write({"i": i}, None)
    registry.get(FileDestination.of("new"))
    assert log == [] and registry.released == 2  # two clean ones closed, nothing sent
    assert FileDestination.of("d00") not in registry and FileDestination.of("d02") not in registry


def test_a_flush_of_the_sink_waits_for_the_writers_still_releasing(tmp_path):
    from pyflink_gcp.core.sink_writer import SinkWriter
    from tests.support.fakes import FileSink

    sink = FileSink(str(tmp_path), lambda r, c: FileDestination.of(r["d"]), max_active=16)
    writer = SinkWriter(sink._sink_config())
    writer.open(SubtaskInfo("file-sink"))
    for i in range(40):
        writer.write({"d": f"d{i:02d}", "i": i})
    assert writer.registry.releasing > 0
    writer.flush()
    assert writer.registry.releasing == 0
    assert all(lines(tmp_path, f"d{i:02d}") == [{"d": f"d{i:02d}", "i": i}] for i in range(40))
    writer.close()


def test_releases_at_the_cap_log_at_debug_only(tmp_path, caplog):
    import logging

    log: list = []
    registry = recording_registry(tmp_path, 2, log)
    with caplog.at_level(logging.INFO, logger="pyflink_gcp.registry"):
        for i in range(50):
            registry.get(FileDestination.of(f"d{i}")).write({"i": i}, None)
    assert registry.released == 48 and caplog.records == []
