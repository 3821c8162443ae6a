"""Starts bqemulator with every use of its one DuckDB connection serialised (run by path).

bqemulator serves its REST API (on the event loop and its thread pool) and its Storage Write API
(on gRPC's thread pool) from one DuckDB connection, guarded by two different locks: an asyncio
lock for REST writes and a threading lock for appends. A DuckDB connection is not safe for
concurrent use, and with tables created over REST while other tables received appends the
emulator was seen to hang or die. This launcher, run with the emulator's own interpreter, puts
one re-entrant lock around every statement, result fetch and (un)registration on that
connection, and makes the append path's lock that same lock, then hands over to the emulator's
command line. It changes no result, only what may overlap.

Usage: ``<bqemulator's python> bq_serialized.py start [bqemulator options]``.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_LOCK = threading.RLock()


class _SerialConnection:
    """A DuckDB connection whose calls hold the process-wide lock."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._raw, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with _LOCK:
                result = attr(*args, **kwargs)
            # ``execute`` returns the connection itself, for chained fetches.
            return self if result is self._raw else result

        return call


def _patch() -> None:
    from bqemulator.grpc_api import write_servicer
    from bqemulator.storage import engine

    cls = engine.DuckDBEngine
    raw_connection = cls.connection.fget
    raw_execute = cls.execute
    raw_fetch_arrow = cls.fetch_arrow

    def connection(self: Any) -> Any:
        return _SerialConnection(raw_connection(self))

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            raw_execute(self, *args, **kwargs)
        return connection(self)

    def fetch_arrow(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return raw_fetch_arrow(self, *args, **kwargs)

    # ``execute`` above goes through the raw connection inside ``raw_execute``.
    cls.connection = property(connection)  # type: ignore[assignment]
    cls.execute = execute  # type: ignore[method-assign]
    cls.fetch_arrow = fetch_arrow  # type: ignore[method-assign]

    handler = write_servicer.BigQueryWriteHandler
    raw_init = handler.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        raw_init(self, *args, **kwargs)
        self._write_lock = _LOCK

    handler.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    _patch()
    from bqemulator.cli import main

    sys.argv[0] = "bqemulator"
    main()
