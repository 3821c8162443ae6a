"""A cancel that lands during a commit: the committer's bundle ends before its operator closes.

PyFlink runs a bundle's flush on a thread of its own while the task thread waits for results;
a cancel interrupts that wait, and the task thread goes on to close the operator while the
flush (here: a commit that takes seconds) still holds a reference to the slot's Python
environment. Closing the environment under a running flush is what let Beam release that
reference twice and end a TaskManager ("Reference count must not be negative", see
docs/reliability.md). The bridge's operators now wait, bounded, for the running flush before
they close. With Python workers as real processes, closing the environment first kills the
worker in the middle of the commit, so the commit's end marker shows which came first.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from pyflink.common import JobStatus

from pyflink_gcp.core import FailureHandler
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig
from tests.support.committing import StagingCommitter, StagingFactory
from tests.support.fakes import FileDestination
from tests.support.jobs import Paced, make_env, record_stream
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]

COMMIT_SECONDS = 4.0


class SlowCommitter(StagingCommitter):
    """Commits as the staging committer does; its first commit then lasts ``COMMIT_SECONDS``,
    with a file when it starts and one when it ends."""

    def __init__(self, factory: SlowCommitFactory) -> None:
        super().__init__(factory)
        self._started = os.path.join(factory.directory, "commit-started")
        self._ended = os.path.join(factory.directory, "commit-ended")

    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> list[Any]:
        kept = super().commit(committables, checkpoint_id, restored, final)
        if committables and not os.path.exists(self._started):
            open(self._started, "w").close()
            time.sleep(COMMIT_SECONDS)
            open(self._ended, "w").close()
        return kept


class SlowCommitFactory(StagingFactory):
    def create_committer(self) -> SlowCommitter:
        return SlowCommitter(self)


def record(i: int) -> dict:
    return {"i": i}


def ended(client: Any) -> bool:
    """Whether the job is cancelled; its MiniCluster shuts down as soon as it is."""
    try:
        return client.get_job_status().result() == JobStatus.CANCELED
    except Exception as e:  # py4j's error for a MiniCluster already shut down
        if "shut down" in str(e):
            return True
        raise


def test_a_cancel_during_a_commit_lets_the_commit_end_before_the_committer_closes(
    tmp_path,
) -> None:
    env = make_env(
        parallelism=1,
        checkpoint_ms=500,
        process_workers=True,
        restarts=0,
        extra={"python.fn-execution.bundle.size": "50"},
    )
    sink = DynamicSink(
        SinkConfig(
            sink_name="slow-commit-sink",
            factory=SlowCommitFactory(str(tmp_path)),
            resolver=lambda r, c: FileDestination.of("all"),
            serializer=lambda r, c: r,
            failure_handler=FailureHandler.fail_job(),
            max_buffered_records=100,
        )
    )
    # A source that lasts: one record every 10 ms.
    record_stream(env, 1_000_000, record).map(Paced(every=1, seconds=0.01)).sink_to(sink)
    client = env.execute_async("cancel during a commit")
    started = tmp_path / "commit-started"
    wait_for(started.exists, "the first commit", timeout_s=120, interval_s=0.1)

    client.cancel().result()
    wait_for(lambda: ended(client), "the job's cancel", interval_s=0.1)
    # Every task closed before the job counts as cancelled: had the committer closed the
    # Python environment while its commit ran, the worker would have been killed before the
    # commit's end (no wait here can change that: the process is gone).
    assert (tmp_path / "commit-ended").exists(), (
        "the committer's operator closed the Python environment during its commit"
    )
