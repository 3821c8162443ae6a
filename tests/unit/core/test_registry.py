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
