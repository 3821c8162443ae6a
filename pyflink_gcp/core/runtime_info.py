"""Identity of the sink subtask a writer runs in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyflink_gcp.core.sink_writer import SinkConfig


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


def subtask_info(runtime_context: Any, config: SinkConfig) -> SubtaskInfo:
    """The :class:`SubtaskInfo` of the operator ``runtime_context`` belongs to (PyFlink's
    ``RuntimeContext``), for the sink ``config`` configures."""
    return SubtaskInfo(
        sink_name=config.sink_name,
        subtask_index=runtime_context.get_index_of_this_subtask(),
        number_of_parallel_subtasks=runtime_context.get_number_of_parallel_subtasks(),
        attempt_number=runtime_context.get_attempt_number(),
        task_name=runtime_context.get_task_name(),
        retry_deadline_s=config.retry_deadline_s,
    )
