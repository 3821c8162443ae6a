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

#: Timeouts of one attempt of session creation, a schema query and the (best-effort) session
#: deletion at close; the first two are capped by the retry deadline. The deletion's is short
#: because it runs in the task's close, also when the task fails: a service that stopped
#: answering would otherwise hold the failover that long (Spanner deletes an idle session
#: itself after an hour, and a reachable one answers a DeleteSession in milliseconds).
_CREATE_TIMEOUT_S = 30.0
_QUERY_TIMEOUT_S = 60.0
_DELETE_TIMEOUT_S = 1.0

#: A regular session unused this long may have been deleted by Spanner (after one hour).
SESSION_MAX_IDLE_S = 50 * 60.0


class Session:
    """One regular session of ``database``, shared by the processing and committer threads.

    Args:
        api: The GAPIC ``SpannerClient`` (or a stand-in with the same methods).
        database: The database the session belongs to.
        sink_name: For errors and logs.
        retry: The retry policy of the calls made here (session creation, schema queries).
        endpoint: ``host:port`` of the service, named by errors.
    """

    def __init__(
        self,
        api: Any,
        database: DatabaseDestination,
        sink_name: str,
        retry: RetryPolicy,
        endpoint: str = "",
    ) -> None:
        self.api = api
        self.database = database
        self.metadata = call_metadata(database)
        self._sink = sink_name
        self._retry = retry
        self._at = f" at {endpoint}" if endpoint else ""
        # Every call is one attempt (``retry=None``: the library's default retry would wait
        # outside the sink's deadline) that never outlasts the retry deadline.
        self._create_timeout = retry.attempt_timeout(_CREATE_TIMEOUT_S)
        self._query_timeout = retry.attempt_timeout(_QUERY_TIMEOUT_S)
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
                    database=str(self.database),
                    retry=None,
                    timeout=self._create_timeout,
                    metadata=self.metadata,
                ).name
            )

        return str(self.call(create, "create a session"))

    def call(self, fn: Callable[[], Any], what: str) -> Any:
        """Run an RPC other than a commit with retries, translating permanent errors."""
        try:
            return self._retry.call(fn, f"sink '{self._sink}': {what} in {self.database}{self._at}")
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
                f"sink '{self._sink}': could not {what} in {self.database}{self._at}: "
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
                    retry=None,
                    timeout=self._query_timeout,
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
            self.api.delete_session(
                name=name, retry=None, timeout=_DELETE_TIMEOUT_S, metadata=self.metadata
            )
        except Exception:  # noqa: BLE001 - best effort
            _LOG.debug("%s: deleting session %s failed", self._sink, name)


def _py(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    return None if kind in (None, "null_value") else getattr(value, kind)
