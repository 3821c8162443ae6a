"""``WriteMethod.BUFFERED_STREAM`` with what its writers prepared and its committer published
logged to a JSON-lines file, for a failed test's message.

:func:`recording` turns a built BUFFERED sink's factory into one whose writers append
``{"prepare", "subtask", "attempt", "commits"}`` per checkpoint, and whose committer appends
``{"commit", "subtask", "attempt", "restored", "final", "got"}`` per commit set and
``{"writers_started"}`` once, each committable as ``[table, stream suffix, offset, finalize]``.
The log lives in a file because the writers and the committer may run in Python worker
processes, where a test's log capture sees nothing.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, ClassVar

from pyflink_gcp.bigquery.buffered import BufferedStreamCommitter
from pyflink_gcp.bigquery.writer import BufferedBigQueryWriterFactory

_LOCK = threading.Lock()


def _commits(commits: list[Any]) -> list[list[Any]]:
    return [[c.table_id, c.stream.rsplit("/", 1)[-1], c.offset, c.finalize] for c in commits]


def _append(path: str, entry: dict[str, Any]) -> None:
    with _LOCK, open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


class RecordingCommitter(BufferedStreamCommitter):
    log_path = ""
    where: ClassVar[dict[str, Any]] = {}

    def open(self, info: Any) -> None:
        super().open(info)
        self.where = {"subtask": info.subtask_index, "attempt": info.attempt_number}

    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> None:
        entry = {"commit": checkpoint_id, **self.where, "restored": restored, "final": final}
        try:
            super().commit(committables, checkpoint_id, restored, final)
        except BaseException as exc:
            _append(self.log_path, {**entry, "got": _commits(committables), "error": repr(exc)})
            raise
        _append(self.log_path, {**entry, "got": _commits(committables), "pid": os.getpid()})

    def writers_started(self) -> None:
        super().writers_started()
        _append(self.log_path, {"writers_started": True, **self.where})


class RecordingFactory(BufferedBigQueryWriterFactory):
    _config_fields: ClassVar[tuple[str, ...]] = (
        *BufferedBigQueryWriterFactory._config_fields,
        "log_path",
    )
    log_path = ""
    where: ClassVar[dict[str, Any]] = {}

    def open(self, info: Any) -> None:
        super().open(info)
        self.where = {"subtask": info.subtask_index, "attempt": info.attempt_number}

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        commits = super().prepare_commit(checkpoint_id)
        entry = {"prepare": checkpoint_id, **self.where, "commits": _commits(commits)}
        _append(self.log_path, {**entry, "pid": os.getpid()})
        return commits

    def create_committer(self) -> BufferedStreamCommitter:
        committer = super().create_committer()
        committer.__class__ = RecordingCommitter
        committer.log_path = self.log_path  # type: ignore[attr-defined]
        return committer


def recording(sink: Any, log_path: str) -> Any:
    """``sink`` (a built BUFFERED_STREAM BigQuery sink) with its commits logged to
    ``log_path``."""
    factory = sink._config.factory
    assert isinstance(factory, BufferedBigQueryWriterFactory), factory
    factory.__class__ = RecordingFactory
    factory.log_path = log_path
    return sink


def history(log_path: str, limit: int = 400) -> str:
    """The log's last ``limit`` lines, for a failed test's message."""
    if not os.path.exists(log_path):
        return "(nothing logged)"
    with open(log_path) as f:
        lines = f.read().splitlines()
    return "\n".join(lines[-limit:])
