"""A fake Pub/Sub rpc for bookkeeping: what was published, and content-based rejection."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import grpc


class Status(grpc.RpcError):
    """A failed call as the generated stubs raise it: ``code()`` and ``details()``."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeRpc:
    """Publishes into lists; a request holding a message whose data starts with ``bad`` fails
    as a whole. ``failures`` are raised first, one per call, before any content check."""

    def __init__(self, failures: list[BaseException] | None = None) -> None:
        self.requests: list[list[bytes]] = []
        self.calls = 0
        self.futures = 0
        self.failures = list(failures or [])
        self.lock = threading.Lock()
        self.endpoint = "127.0.0.1:8085"

    def publish(self, topic, messages):
        with self.lock:
            self.calls += 1
            if self.failures:
                raise self.failures.pop(0)
            if any(m.data.startswith(b"bad") for m in messages):
                raise Status(grpc.StatusCode.INVALID_ARGUMENT, "message data is invalid")
            self.requests.append([m.data for m in messages])

    def publish_future(self, topic, messages):
        """``publish`` on a thread of its own, as a future (gRPC runs a started call
        elsewhere too); ``futures`` counts the calls started this way."""
        self.futures += 1
        future: Future = Future()

        def run():
            try:
                future.set_result(self.publish(topic, messages))
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                future.set_exception(exc)

        threading.Thread(target=run, daemon=True).start()
        return future

    def close(self):
        """Nothing to release (the factory closes its rpc)."""

    @property
    def published(self) -> list[bytes]:
        return [data for request in self.requests for data in request]
