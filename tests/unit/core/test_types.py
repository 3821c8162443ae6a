"""Contract value types: destinations, the writer context, unroutable records."""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.core import Destination, UnroutableRecord, WriterContext
from tests.support.fakes import FileDestination


class _Topic(Destination):
    __slots__ = ()

    def __init__(self, project: str, topic: str) -> None:
        self._init_name(f"projects/{project}/topics/{topic}")


def test_destinations_are_values_keyed_by_resource_name():
    a, b = _Topic("p", "orders"), _Topic("p", "orders")
    assert a == b and hash(a) == hash(b) and a is not b
    assert str(a) == "projects/p/topics/orders"
    assert {a: 1}[b] == 1
    assert a != _Topic("p", "other")
    assert a != FileDestination("projects/p/topics/orders")
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.x = 1  # type: ignore[attr-defined]


def test_writer_context_has_no_wall_clock_and_normalises_missing_timestamps():
    ctx = WriterContext(subtask_index=1, number_of_parallel_subtasks=4)
    ctx._set_time(-(2**63), 5)
    assert ctx.timestamp is None and ctx.current_watermark == 5
    ctx._set_time(1_700_000_000_000, None)
    assert ctx.timestamp == 1_700_000_000_000 and ctx.current_watermark == 5
    assert not hasattr(ctx, "now")


def test_unroutable_record_requires_bytes():
    assert UnroutableRecord.of(b"x", "unknown tenant").reason == "unknown tenant"
    with pytest.raises(TypeError):
        UnroutableRecord.of("x", "r")  # type: ignore[arg-type]
