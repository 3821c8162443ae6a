"""The writer contracts' helpers: configuration-only pickling of factories."""

from __future__ import annotations

import pickle
import threading

from pyflink_gcp.core.writer import PicklesConfiguration


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
