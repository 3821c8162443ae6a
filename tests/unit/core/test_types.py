"""Contract value types: destinations (the project from the environment, the bounded ``of()``
cache), the writer context, unroutable records."""

from __future__ import annotations

import importlib
import pickle

import pytest

from pyflink_gcp.core import Destination, UnroutableRecord, WriterContext, types
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


#: Each service's destination type: (the class, the ids after the project, their names).
SERVICE_DESTINATIONS = [
    ("pyflink_gcp.pubsub", "TopicDestination", ("orders",), "topic"),
    ("pyflink_gcp.bigquery", "TableDestination", ("ds", "t"), "dataset, table"),
    ("pyflink_gcp.bigtable", "TableDestination", ("inst", "t-1"), "instance, table"),
    ("pyflink_gcp.cloudtasks", "QueueDestination", ("us-central1", "q-1"), "location, queue"),
    ("pyflink_gcp.spanner", "DatabaseDestination", ("inst", "db1"), "instance, database"),
]


def _service_type(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    ("module", "name", "ids", "names"),
    SERVICE_DESTINATIONS,
    ids=[m for m, *_ in SERVICE_DESTINATIONS],
)
def test_a_destination_without_project_is_in_google_cloud_project(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str, ids: tuple[str, ...], names: str
) -> None:
    """The variable is read when the value is built and becomes part of its resource name."""
    cls = _service_type(module, name)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    short = cls.of(*ids)
    assert short == cls.of("env-project", *ids)
    assert short.resource_name.startswith("projects/env-project/")
    assert pickle.loads(pickle.dumps(short)) == short
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "other-project")
    assert cls.of(*ids).resource_name.startswith("projects/other-project/")  # read per call
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    assert short.resource_name.startswith("projects/env-project/")
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT is not set"):
        cls.of(*ids)
    with pytest.raises(
        TypeError, match=rf"{name}.of\({names}\) in the project GOOGLE_CLOUD_PROJECT"
    ):
        cls.of(*ids[1:])


@pytest.mark.parametrize(
    ("module", "name", "ids", "names"),
    SERVICE_DESTINATIONS,
    ids=[m for m, *_ in SERVICE_DESTINATIONS],
)
def test_of_keeps_what_it_built_in_one_bounded_cache(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str, ids: tuple[str, ...], names: str
) -> None:
    cls = _service_type(module, name)
    first = cls.of("p", *ids)
    assert cls.of("p", *ids) is first
    assert cls(*("p", *ids)) == first and cls(*("p", *ids)) is not first
    monkeypatch.setattr(types, "_BUILT", {})
    monkeypatch.setattr(types, "MAX_BUILT_DESTINATIONS", 3)
    built = [cls.of(f"p{i}", *ids) for i in range(3)]
    assert len(types._BUILT) == 3
    assert cls.of("p0", *ids) is built[0]
    cls.of("p3", *ids)  # full: emptied, then the new value kept
    assert len(types._BUILT) == 1
    assert cls.of("p0", *ids) is not built[0] and cls.of("p0", *ids) == built[0]


def test_invalid_ids_are_not_kept() -> None:
    from pyflink_gcp.pubsub import TopicDestination

    size = len(types._BUILT)
    for _ in range(2):
        with pytest.raises(ValueError, match="invalid Pub/Sub topic id 'ab'"):
            TopicDestination.of("p", "ab")
    assert len(types._BUILT) == size
