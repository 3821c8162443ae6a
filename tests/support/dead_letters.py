"""Dead-letter queues for tests: in memory (writer in the test process) or in a file (jobs)."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.core import DeadLetterQueue, FailedRecord, SubtaskInfo
from tests.support.jsonl import append_json, read_json_lines


class MemoryDeadLetterQueue(DeadLetterQueue):
    """Keeps dead letters in a list, for tests that run the writer in their own process."""

    def __init__(self) -> None:
        self.sent: list[FailedRecord] = []
        self.flushes = 0

    def open(self, info: SubtaskInfo) -> None:
        pass

    def send(self, failed: FailedRecord) -> None:
        self.sent.append(failed)

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        pass


class FileDeadLetterQueue(DeadLetterQueue):
    """Appends dead letters as JSON lines to a file, so a test can read what a job (in other
    processes) dead-lettered: destination, reason, attributes, the record and the payload size."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, info: SubtaskInfo) -> None:
        pass

    def send(self, failed: FailedRecord) -> None:
        append_json(
            self.path,
            {
                "destination": failed.destination,
                "reason": failed.reason,
                "attributes": failed.attributes,
                "record": failed.record_repr,
                "payload_bytes": len(failed.payload),
            },
        )

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def read(self) -> list[dict[str, Any]]:
        return read_json_lines(self.path)
