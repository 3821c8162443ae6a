"""Identity of the sink subtask a writer runs in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SubtaskInfo:
    """Which subtask of which sink is running; handed to everything opened per subtask."""

    sink_name: str
    subtask_index: int = 0
    number_of_parallel_subtasks: int = 1
    attempt_number: int = 0
    task_name: str = ""
    #: The sink's ``retry_deadline`` in seconds, so what the subtask opens besides the writers
    #: (a dead-letter queue) shares its bound; None where the sink has none.
    retry_deadline_s: float | None = None
