"""A committing (exactly-once) test sink over files, recording every step of the protocol.

The writer stages each destination's records in memory and, at ``flush()``, in its subtask's
staged list: durable for the protocol, invisible to a reader. ``prepare_commit`` turns the
staged records into one committable, named ``<subtask>-<attempt>-<run>-<seq>`` (``run`` is new
each time a writer opens, so names never repeat across jobs). The committer appends
a committable's records to ``committed.jsonl`` (one line per record, with the committable's
name, so a repeated commit shows as the same name twice). Every prepare and commit is logged to
``_protocol.jsonl`` with its checkpoint id, so a test can check the order of the steps from the
files alone, whichever process ran them.

Faults for the tests, each once per marker file: ``slow_prepare`` sleeps in the prepare of a
given checkpoint (so it expires), ``kill_in_commit`` ends the Python worker in the middle of a
commit (after the records were written: the commit must be repeated, and is). With
``keep_once`` the committer keeps each committable the first time it sees it (returns it,
publishing nothing), and publishes it when it comes back with a later set: the committer
operator's kept state, as FILE_LOADS uses it for files waiting out ``min_load_interval``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from typing import Any

from pyflink_gcp.core import DestinationWriter, FailedRecord, FailureHandler, SubtaskInfo
from pyflink_gcp.core.commit import Committer, CommittingWriterFactory
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig
from tests.support.fakes import FileDestination

_lock = threading.Lock()


def _append(path: str, lines: list[dict[str, Any]]) -> None:
    with _lock, open(path, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def _once(marker: str | None) -> bool:
    """True the first time for ``marker`` (a file path), across restarts and processes."""
    if marker is None or os.path.exists(marker):
        return False
    with open(marker, "w") as f:
        f.write("done\n")
    return True


class StagingWriter(DestinationWriter[FileDestination]):
    def __init__(self, destination: FileDestination, factory: StagingFactory) -> None:
        super().__init__(destination)
        self._factory = factory
        self._buffer: list[Any] = []

    def write(self, element: Any, record: Any) -> None:
        self._buffer.append(element)

    def flush(self) -> list[FailedRecord]:
        self._factory.staged.extend(self._buffer)
        self._buffer = []
        return []

    @property
    def is_clean(self) -> bool:
        return not self._buffer


class StagingCommitter(Committer):
    def __init__(self, factory: StagingFactory) -> None:
        self._directory = factory.directory
        self._kill_marker = factory.kill_in_commit
        self._keep_once = factory.keep_once
        self._subtask = -1

    def open(self, info: SubtaskInfo) -> None:
        self._subtask = info.subtask_index

    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> list[Any]:
        kept: list[Any] = []
        published: list[Any] = []
        for c in committables:
            if self._keep_once and not (c.get("kept") or restored or final):
                kept.append({**c, "kept": True})
            else:
                published.append(c)
        lines = [{"id": c["id"], "i": r["i"]} for c in published for r in c["records"]]
        _append(os.path.join(self._directory, "committed.jsonl"), lines)
        _append(
            os.path.join(self._directory, "_protocol.jsonl"),
            [
                {
                    "step": "commit",
                    "checkpoint": checkpoint_id,
                    "restored": restored,
                    "final": final,
                    "ids": [c["id"] for c in published],
                    "kept": [c["id"] for c in kept],
                    "committer": self._subtask,
                    "t": time.time(),
                }
            ],
        )
        if published and _once(self._kill_marker):
            os._exit(19)  # the worker dies after writing, before the commit is acknowledged
        return kept


class StagingFactory(CommittingWriterFactory):
    destination_type = FileDestination

    def __init__(
        self,
        directory: str,
        *,
        slow_prepare: tuple[int, float, str] | None = None,
        kill_in_commit: str | None = None,
        keep_once: bool = False,
    ) -> None:
        self.directory = directory
        self.slow_prepare = slow_prepare
        self.kill_in_commit = kill_in_commit
        self.keep_once = keep_once
        self.info: SubtaskInfo | None = None
        self.staged: list[Any] = []
        self._seq = 0
        self._run = ""

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        self.staged = []
        self._seq = 0
        self._run = uuid.uuid4().hex[:8]

    def create_writer(self, destination: FileDestination) -> StagingWriter:
        return StagingWriter(destination, self)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        assert self.info is not None
        if self.slow_prepare is not None:
            at, seconds, marker = self.slow_prepare
            if checkpoint_id == at and _once(marker):
                time.sleep(seconds)
        name = f"{self.info.subtask_index}-{self.info.attempt_number}-{self._run}-{self._seq}"
        self._seq += 1
        committable = {"id": name, "records": self.staged}
        self.staged = []
        _append(
            os.path.join(self.directory, "_protocol.jsonl"),
            [
                {
                    "step": "prepare",
                    "checkpoint": checkpoint_id,
                    "id": name,
                    "count": len(committable["records"]),
                    "subtask": self.info.subtask_index,
                    "t": time.time(),
                }
            ],
        )
        return [committable]

    def create_committer(self) -> StagingCommitter:
        return StagingCommitter(self)


class StagingSink(DynamicSink):
    """A sink over :class:`StagingFactory`, one destination."""

    def __init__(self, directory: str, **factory_options: Any) -> None:
        super().__init__(
            SinkConfig(
                sink_name="staging-sink",
                factory=StagingFactory(directory, **factory_options),
                resolver=lambda r, c: FileDestination.of("all"),
                serializer=lambda r, c: r,
                failure_handler=FailureHandler.fail_job(),
                max_buffered_records=100,
            )
        )


def protocol(directory: str) -> list[dict[str, Any]]:
    """The logged steps, in the order they happened."""
    path = os.path.join(directory, "_protocol.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f]


def committed_records(directory: str) -> Counter[int]:
    """How often each record was published: once per distinct committable holding it (a
    committable committed twice publishes its records once, as an idempotent commit does)."""
    path = os.path.join(directory, "committed.jsonl")
    if not os.path.exists(path):
        return Counter()
    with open(path) as f:
        pairs = {(line["id"], line["i"]) for line in map(json.loads, f)}
    return Counter(i for _, i in pairs)
