"""The writer factory: configuration-only pickling, opening, building batchers (no call made)."""

from __future__ import annotations

import pickle
from datetime import timedelta

import cloudpickle
import pytest

from pyflink_gcp.bigtable import BigtableWriterOptions, TableCreateOptions, TableDestination
from pyflink_gcp.bigtable.batcher import TableBatcher
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core import SubtaskInfo, WriteError

TABLE = TableDestination.of("p", "inst", "t")


def make_factory(**options: object) -> BigtableWriterFactory:
    return BigtableWriterFactory(
        sink_name="unit",
        options=BigtableWriterOptions(**options),  # type: ignore[arg-type]
        create_options=TableCreateOptions(column_families={"cf": 1}),
        endpoint="http://127.0.0.1:1",
        resolver_name="my.resolver",
    )


def test_only_the_configuration_travels() -> None:
    factory = make_factory(retry_deadline=timedelta(seconds=9))
    factory.open(SubtaskInfo("unit"))
    factory.stats.add(requests=3)
    try:
        for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
            copy = loads(dumps(factory))
            assert copy.client is None and copy.tables is None and copy.slots.in_use == 0
            assert copy.stats.requests == 0
            assert copy.retry_policy.deadline_s == 9
            for name in BigtableWriterFactory._config_fields:
                assert getattr(copy, name) == getattr(factory, name), name
    finally:
        factory.close()


def test_open_builds_batchers_sharing_the_subtask_event_loop() -> None:
    factory = make_factory(app_profile_id="batch", max_in_flight_requests=3)
    with pytest.raises(WriteError, match="not open"):
        factory.create_writer(TABLE)
    factory.open(SubtaskInfo("unit", subtask_index=1))
    try:
        assert factory.client is not None
        data = factory.client.data
        assert data._thread.is_alive() and factory.slots._limit() == 3
        assert factory.tables is not None
        factory.tables._known.add(str(TABLE))  # as if checked: no admin call here
        batcher = factory.create_writer(TABLE)
        assert isinstance(batcher, TableBatcher)
        call = batcher._call
        assert factory.client is not None and call.stub is factory.client.mutate_rows
        assert call.stats is factory.stats and call.policy is factory.retry_policy
        assert call.slots is factory.slots and call.window is factory.quota
        assert batcher._start == factory.start
        assert factory.queue is not None and factory.queue._limit() == 6  # 2 per call
        assert factory.start(_answer, 42).result(timeout=5) == 42  # queued for the loop
        assert dict(call.metadata)["x-goog-request-params"].endswith("&app_profile_id=batch")
        assert factory.stats.batchers_created == 1
    finally:
        factory.close()
    assert factory.client is None and not data._thread.is_alive()  # closing stops the loop
    assert factory.queue is None
    with pytest.raises(WriteError, match="not open"):
        factory.start(call.run, None)


async def _answer(value: int) -> int:
    return value
