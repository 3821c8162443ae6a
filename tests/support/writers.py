"""Open a sink's subtask writer in the test process, without Flink.

Integration tests drive a sink's own :class:`SinkWriter` against the emulators: the same
configuration a job would ship, opened as subtask ``subtask`` of ``parallelism``.
"""

from __future__ import annotations

from typing import Any

import cloudpickle

from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.core.sink_writer import SinkWriter


def open_writer(
    sink: Any, subtask: int = 0, parallelism: int = 1, *, pickled: bool = False
) -> SinkWriter:
    """The sink's subtask writer, opened in this process.

    Args:
        sink: A built sink (any service).
        subtask: The subtask index the writer reports.
        parallelism: The number of parallel subtasks it reports.
        pickled: Round-trip the configuration through cloudpickle first, as Flink does when it
            ships the sink to a worker, so the test also covers what survives pickling.
    """
    config = sink._sink_config()
    if pickled:
        config = cloudpickle.loads(cloudpickle.dumps(config))
    writer = SinkWriter(config)
    writer.open(SubtaskInfo(config.sink_name, subtask, parallelism))
    return writer
