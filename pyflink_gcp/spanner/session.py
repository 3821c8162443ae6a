"""The subtask's Spanner session, and the calls other than commits made in it.

A subtask commits in one regular session (it commits one request at a time, so a pool would
only hold idle sessions). The session is created on first use, replaced before Spanner may
delete it for being idle (after an hour), and replaced when Spanner answers "Session not found".
The schema is read in it when the writer opens, and again when a mutation names a table or
column the writer does not know.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.protobuf import struct_pb2

from pyflink_gcp.core.errors import DestinationNotFoundError, SinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.spanner.client import call_metadata
from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.schema import DatabaseSchema, read_schema

_LOG = logging.getLogger("pyflink_gcp.spanner")

#: A regular session unused this long may have been deleted by Spanner (after one hour).
SESSION_MAX_IDLE_S = 50 * 60.0


class Session:
    """One regular session of ``database``, shared by the processing and committer threads.

    Args:
        api: The GAPIC ``SpannerClient`` (or a stand-in with the same methods).
        database: The database the session belongs to.
        sink_name: For errors and logs.
        retry: The retry policy of the calls made here (session creation, schema queries).
    """

    def __init__(
        self, api: Any, database: DatabaseDestination, sink_name: str, retry: RetryPolicy
    ) -> None:
        self.api = api
        self.database = database
        self.metadata = call_metadata(database)
        self._sink = sink_name
        self._retry = retry
        self._name: str | None = None
        self._used = 0.0
        self._lock = threading.Lock()

    def name(self) -> str:
        """The session's name, created on first use and renewed before it can expire."""
        with self._lock:
            now = time.monotonic()
            if self._name is None or now - self._used > SESSION_MAX_IDLE_S:
                self._name = self._create()
            self._used = now
            return self._name

    def renew(self, stale: str) -> None:
        """Forget ``stale`` (Spanner answered "Session not found") so the next call makes one."""
        with self._lock:
            if self._name == stale:
                self._name = None

    def _create(self) -> str:
        def create() -> str:
            return str(
                self.api.create_session(
                    database=str(self.database), timeout=30.0, metadata=self.metadata
                ).name
            )

        return str(self.call(create, "create a session"))

    def call(self, fn: Callable[[], Any], what: str) -> Any:
        """Run an RPC other than a commit with retries, translating permanent errors."""
        try:
            return self._retry.call(fn, f"sink '{self._sink}': {what} in {self.database}")
        except SinkError:
            raise
        except api_exceptions.NotFound as exc:
            raise DestinationNotFoundError(
                f"sink '{self._sink}': Spanner database {self.database} not found "
                f"(could not {what}): {exc.message}. The sink never creates databases or "
                "tables: create them before starting the job."
            ) from exc
        except Exception as exc:
            raise WriteError(
                f"sink '{self._sink}': could not {what} in {self.database}: "
                f"{status_name(exc) or type(exc).__name__}: {exc}"
            ) from exc

    def read_schema(self) -> DatabaseSchema:
        """Every table's columns, primary key and secondary indexes, from INFORMATION_SCHEMA.

        The caller makes sure no commit is in flight in the session.
        """
        session = self.name()

        def query(sql: str) -> list[list[Any]]:
            def run() -> Any:
                return self.api.execute_sql(
                    request={"session": session, "sql": sql},
                    timeout=60.0,
                    metadata=self.metadata,
                )

            result = self.call(run, "read the schema")
            return [[_py(v) for v in row.values] for row in result._pb.rows]

        try:
            return read_schema(query)
        except WriteError as exc:
            if "INVALID_ARGUMENT" in str(exc):
                raise WriteError(
                    f"sink '{self._sink}': could not read the schema of {self.database} "
                    "from INFORMATION_SCHEMA; only GoogleSQL-dialect databases are supported "
                    f"({exc})"
                ) from exc
            raise

    def close(self) -> None:
        """Delete the session (best effort: Spanner deletes idle sessions itself)."""
        name, self._name = self._name, None
        if name is None:
            return
        try:
            self.api.delete_session(name=name, timeout=5.0, metadata=self.metadata)
        except Exception:  # noqa: BLE001 - best effort
            _LOG.debug("%s: deleting session %s failed", self._sink, name)


def _py(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    return None if kind in (None, "null_value") else getattr(value, kind)
