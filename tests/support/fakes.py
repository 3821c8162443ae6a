"""An in-memory-then-file destination writer for testing the core's bookkeeping.

Each flush appends the buffered elements of a destination to ``<dir>/<name>.jsonl`` and logs the
flush to ``<dir>/_flushes.jsonl``, so a test can read back what a job wrote from another process.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.core import (
    Destination,
    DestinationWriter,
    FailedRecord,
    FailureHandler,
    SubtaskInfo,
    WriterFactory,
)
from pyflink_gcp.core.builder import CreatingSinkBuilder
from pyflink_gcp.core.options import CreatingOptionsBuilder, CreatingWriterOptions
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig

_lock = threading.Lock()


class FileDestination(Destination):
    __slots__ = ()

    def __init__(self, name: str) -> None:
        self._init_name(f"files/{name}")

    @staticmethod
    def of(name: str) -> FileDestination:
        return FileDestination(name)

    @property
    def short(self) -> str:
        return self._name.split("/", 1)[1]


class FileWriter(DestinationWriter[FileDestination]):
    def __init__(self, destination: FileDestination, factory: FileWriterFactory) -> None:
        super().__init__(destination)
        self._factory = factory
        self._buffer: list[Any] = []
        self.closed = False

    def write(self, element: Any, record: Any) -> None:
        if self.closed:
            raise AssertionError("write on a closed writer")
        self._buffer.append(element)
        self.bytes_accepted += len(json.dumps(element))

    def start_flush(self) -> None:
        """An ordinary bundle end under checkpoint markers: only logged (nothing is sent)."""
        self._factory.log_event(
            {"event": "start", "destination": self.destination.short, "count": len(self._buffer)}
        )

    def flush(self) -> list[FailedRecord]:
        failures = []
        good = []
        for element in self._buffer:
            if isinstance(element, dict) and element.get("reject"):
                failures.append(
                    FailedRecord(
                        self._factory.sink,
                        str(self.destination),
                        "rejected",
                        json.dumps(element).encode(),
                    )
                )
            else:
                good.append(element)
        if good:
            self._factory.append(self.destination.short, good)
        self._factory.log_event(
            {"event": "flush", "destination": self.destination.short, "count": len(self._buffer)}
        )
        self._buffer = []
        return failures

    @property
    def is_clean(self) -> bool:
        return not self._buffer

    def close(self) -> None:
        self.closed = True
        self._factory.log_event(
            {"event": "close", "destination": self.destination.short, "count": len(self._buffer)}
        )


class FileWriterFactory(WriterFactory[FileDestination]):
    destination_type = FileDestination

    def __init__(self, directory: str, fail_after_flushes: int | None = None) -> None:
        self.directory = directory
        self.sink = "files"
        self.info: SubtaskInfo | None = None

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        self.sink = info.sink_name

    def create_writer(self, destination: FileDestination) -> FileWriter:
        self.log_event({"event": "create", "destination": destination.short})
        return FileWriter(destination, self)

    def append(self, name: str, elements: list[Any]) -> None:
        with _lock, open(os.path.join(self.directory, f"{name}.jsonl"), "a") as f:
            for e in elements:
                f.write(json.dumps(e) + "\n")

    def log_event(self, event: dict[str, Any]) -> None:
        assert self.info is not None
        event["subtask"] = self.info.subtask_index
        with _lock, open(os.path.join(self.directory, "_events.jsonl"), "a") as f:
            f.write(json.dumps(event) + "\n")


class FileSink(DynamicSink):
    """A sink over FileWriterFactory, built like the real ones."""

    def __init__(
        self,
        directory: str,
        resolver: Any,
        serializer: Any = None,
        *,
        failure_handler: FailureHandler | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            SinkConfig(
                sink_name="file-sink",
                factory=FileWriterFactory(directory),
                resolver=resolver,
                serializer=serializer or (lambda r, c: r),
                failure_handler=failure_handler or FailureHandler.fail_job(),
                **options,
            )
        )


@dataclass(frozen=True, kw_only=True)
class FileOptions(CreatingWriterOptions):
    """The file sink's writer options: the shared settings only."""


class FileOptionsBuilder(CreatingOptionsBuilder[FileOptions]):
    options_type = FileOptions


class FileSinkBuilder(CreatingSinkBuilder):
    """A builder over the core builder base, as a service's would be; ``build()`` returns the
    sink's :class:`SinkConfig` (for tests of the builder base)."""

    default_name = "file-sink"
    options_type = FileOptions

    def __init__(self, directory: str = "/nonexistent") -> None:
        super().__init__()
        self._directory = directory

    def build(self) -> SinkConfig:
        name = self._validate_common()
        return self._sink_config(name, FileWriterFactory(self._directory), self._serializer)


class WatermarkContext:
    """The context PyFlink hands a process function, as far as a marker reads it: the
    element's watermark (bookkeeping)."""

    def __init__(self, watermark: int) -> None:
        self._watermark = watermark

    def timer_service(self) -> WatermarkContext:
        return self

    def current_watermark(self) -> int:
        return self._watermark
