"""Picklable pieces of the Bigtable e2e jobs (imported by the Python workers by reference)."""

from __future__ import annotations

import time
from typing import Any

from pyflink_gcp.bigtable import RowMutationEntry, SetCell, TableDestination
from pyflink_gcp.bigtable.batcher import TableBatcher
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core import SubtaskInfo
from tests.support.jsonl import append_json, read_json_lines

PROJECT = "test-project"
DAY_MS = 86_400_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_append = append_json
read_events = read_json_lines


def day_of(ts_ms: int) -> str:
    return time.strftime("%Y%m%d", time.gmtime(ts_ms // 1000))


class DayTableResolver:
    """Routes an event to ``<prefix>_<yyyymmdd>`` of its event time (a table per day)."""

    def __init__(self, instance: str, prefix: str) -> None:
        self.instance = instance
        self.prefix = prefix

    def resolve(self, event: dict[str, Any], context: Any) -> TableDestination:
        return TableDestination.of(PROJECT, self.instance, f"{self.prefix}_{day_of(event['ts'])}")


def event_entry(event: dict[str, Any], context: Any) -> RowMutationEntry:
    """One row per event: its value and its day, stamped with the event time."""
    micros = event["ts"] * 1000
    return RowMutationEntry(
        b"e%06d" % event["i"],
        [
            SetCell("cf", b"value", str(event["i"]).encode(), micros),
            SetCell("meta", b"day", day_of(event["ts"]).encode(), micros),
        ],
    )


class RecordingFactory(BigtableWriterFactory):
    """The real factory, logging each batcher's creation and close (eviction) to a file."""

    # The log's path travels to the workers with the factory's own configuration.
    _config_fields = (*BigtableWriterFactory._config_fields, "events_path")

    @classmethod
    def replacing(cls, factory: BigtableWriterFactory, path: str) -> RecordingFactory:
        recording = cls.__new__(cls)
        recording.__setstate__(factory.__getstate__())
        recording.events_path = path
        return recording

    events_path: str

    def open(self, info: SubtaskInfo) -> None:
        super().open(info)
        self._event("open")

    def create_writer(self, destination: TableDestination) -> TableBatcher:
        batcher = super().create_writer(destination)
        self._event("create", destination.table)
        close = batcher.close

        def recording_close() -> None:
            self._event("close", destination.table)
            close()

        batcher.close = recording_close  # type: ignore[method-assign]
        return batcher

    def close(self) -> None:
        self._event("stats", entries=self.stats.entries_sent, requests=self.stats.requests)
        super().close()

    def _event(self, kind: str, table: str | None = None, **extra: Any) -> None:
        info = self._info
        assert info is not None
        _append(
            self.events_path,
            {
                "event": kind,
                "table": table,
                "subtask": info.subtask_index,
                "attempt": info.attempt_number,
                **extra,
            },
        )
