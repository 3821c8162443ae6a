"""``WriteMethod.FILE_LOADS`` with its load jobs logged, for tests that count them.

:func:`recording` turns a built FILE_LOADS sink's factory into one whose committer appends
``{"job", "table", "files", "names", "found"}`` to ``log_path`` after every load job it saw
succeed (``names``: the files' object names; ``found``: the job was started before, by an
earlier commit or attempt, and found by its id), a line per commit and per orphan sweep, and (``kill_marker``) ends the Python worker
right after its first load, before the commit is acknowledged, so the restored job commits the
same set again.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory
from pyflink_gcp.bigquery.load_jobs import LoadGroup, LoadJobCommitter, LoadResult


class RecordingCommitter(LoadJobCommitter):
    log_path = ""
    kill_marker: str | None = None

    def commit(self, committables: list[Any], checkpoint_id: int, *args: Any) -> list[Any]:
        kept = super().commit(committables, checkpoint_id, *args)
        entry = {
            "commit": checkpoint_id,
            "mode": list(args),
            "got": [type(c).__name__ for c in committables],
            "kept": [[type(k).__name__, [f.name for f in k.files]] for k in kept],
        }
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")
        return kept

    def writers_started(self) -> None:
        super().writers_started()
        swept = [] if self.orphans is None else list(self.orphans.deleted)
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"writers_started": True, "swept": swept}) + "\n")

    def _run(self, load: LoadGroup, *args: Any) -> LoadResult:
        result = super()._run(load, *args)
        if result.running is not None:  # logged by the commit that sees it succeed
            return result
        entry = {
            "job": result.job_id,
            "table": load.table_id,
            "files": len(load.files),
            "names": [f.name for f in load.files],
            "found": result.found,
        }
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")
        if self.kill_marker is not None and not os.path.exists(self.kill_marker):
            open(self.kill_marker, "w").close()
            os._exit(29)  # loaded, not acknowledged: the commit runs again after the restore
        return result


class RecordingFactory(FileLoadsWriterFactory):
    _config_fields: ClassVar[tuple[str, ...]] = (
        *FileLoadsWriterFactory._config_fields,
        "log_path",
        "kill_marker",
    )
    log_path = ""
    kill_marker: str | None = None

    def create_committer(self) -> LoadJobCommitter:
        committer = super().create_committer()
        committer.__class__ = RecordingCommitter
        committer.log_path = self.log_path  # type: ignore[attr-defined]
        committer.kill_marker = self.kill_marker  # type: ignore[attr-defined]
        return committer


def recording(sink: Any, log_path: str, kill_marker: str | None = None) -> Any:
    """``sink`` with its load jobs logged to ``log_path`` (see the module docstring)."""
    factory = sink._config.factory
    factory.__class__ = RecordingFactory
    factory.log_path = log_path
    factory.kill_marker = kill_marker
    return sink


def load_log(log_path: str) -> list[dict[str, Any]]:
    """The load jobs the committer saw succeed, in order."""
    return [entry for entry in commit_log(log_path) if "job" in entry]


def commit_log(log_path: str) -> list[dict[str, Any]]:
    """Everything the committer logged: its commits (checkpoint, mode, what it got and kept),
    its load jobs and its orphan sweeps, in order; for a failed test's message."""
    if not os.path.exists(log_path):
        return []
    with open(log_path) as f:
        return [json.loads(line) for line in f]
