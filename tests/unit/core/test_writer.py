"""The writer contracts' helpers: configuration-only pickling of factories, and the open batch
a destination writer reports to the sink's bundle ends."""

from __future__ import annotations

import math
import pickle
import threading
from typing import Any

from pyflink_gcp.core.batching import OpenBatch
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.types import Destination
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration


class _Factory(PicklesConfiguration):
    _config_fields = ("name", "limit")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._init_runtime()

    def _init_runtime(self) -> None:
        self.lock = threading.Lock()
        self.client = None

    def open(self) -> None:
        self.client = threading.Thread(target=lambda: None)


def test_only_configuration_travels_and_runtime_state_is_rebuilt():
    factory = _Factory("s", 3)
    factory.open()
    factory.added_later = threading.Lock()  # a runtime field nobody listed
    copy = pickle.loads(pickle.dumps(factory))
    assert (copy.name, copy.limit, copy.client) == ("s", 3, None)
    assert isinstance(copy.lock, type(threading.Lock())) and copy.lock is not factory.lock
    assert not hasattr(copy, "added_later")


class _Writer(DestinationWriter[Destination]):
    def write(self, element: Any, record: Any) -> None:
        if self.open_batch is not None:
            self.open_batch.append(element)

    def flush(self) -> list[FailedRecord]:
        return []

    @property
    def is_clean(self) -> bool:
        return True


def test_a_writer_without_an_open_batch_is_always_due_and_holds_nothing():
    writer = _Writer(Destination())
    assert writer.unsent_since == -math.inf and writer.unsent_records == 0


def test_a_writer_with_an_open_batch_reports_its_age_and_size():
    writer = _Writer(Destination())
    writer.open_batch = OpenBatch()
    assert writer.unsent_since == math.inf and writer.unsent_records == 0
    writer.write("a", "a")
    writer.write("b", "b")
    assert writer.unsent_since == writer.open_batch.since < math.inf
    assert writer.unsent_records == 2
    writer.open_batch.cut()
    assert writer.unsent_since == math.inf and writer.unsent_records == 0
