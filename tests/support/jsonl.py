"""JSON-lines files that Flink workers append to and tests read back (thread- and process-safe
enough for tests: one line per write, appended under a lock)."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

_lock = threading.Lock()


def append_json(path: str, event: dict[str, Any]) -> None:
    with _lock, open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def read_json_lines(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]
