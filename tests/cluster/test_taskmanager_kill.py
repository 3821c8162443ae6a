"""A TaskManager killed with SIGKILL in the middle of a checkpointed Pub/Sub job loses nothing.

The job runs on a standalone cluster (two TaskManagers of two slots, parallelism 4, so both
hold sink subtasks), submitted with ``flink run -py`` as a cluster user submits it. Once two
checkpoints completed, one TaskManager is killed with its whole process group (the JVM and its
Python workers: nothing gets to flush). The job needs every slot, so a replacement is started
as soon as every subtask of the job has its slot in the first two TaskManagers, and has
registered when the kill comes: the restart finds its slots at once. The job is paced until
the kill, so it is still running when the kill lands however slowly it started, and unpaced
after it, so the rest of its input, the replay from the restored checkpoint included, costs
no waiting. The job must recover from a checkpoint and finish, and every record must be read
back from the two topics: duplicates are allowed (the sink is at least once), losses are not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.cluster.conftest import running_cluster
from tests.support.pubsub import make_topics, pull_all, unique

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

JOB = Path(__file__).parent / "jobs" / "pubsub_numbered.py"
#: Records of 30 ms each over four subtasks until the kill (22 s of input a subtask): the job
#: runs long enough after its second checkpoint for the kill to hit it.
COUNT = 3000
#: The paced map's Python bundle: 50 records of 30 ms, so each checkpoint's barrier waits for
#: a second and a half of records at most.
BUNDLE = 50


def wait_for_slots(cluster: StandaloneCluster, job: str, timeout: float = 120.0) -> None:
    """Waits until no subtask of ``job`` waits for a slot (none is CREATED or SCHEDULED)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        vertices = cluster.job(job).get("vertices", [])
        if vertices and all(
            v["tasks"].get("CREATED", 0) + v["tasks"].get("SCHEDULED", 0) == 0 for v in vertices
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job}: subtasks still without a slot after {timeout:g} s")


def test_killed_taskmanager_loses_no_record(
    request: pytest.FixtureRequest, stack: EmulatorStack, project: str, tmp_path: Path
) -> None:
    topic = unique("tm-kill")
    topics = [f"{topic}-even", f"{topic}-odd"]
    make_topics(project, topics)
    with running_cluster(request, stack) as cluster:
        submitted = cluster.submit(
            JOB,
            *("--project", project, "--topic", topic, "--count", str(COUNT)),
            *("--bundle-size", str(BUNDLE), "--control", str(tmp_path)),
            parallelism=4,
            detached=True,
            timeout=300,
        )
        assert submitted.ok and submitted.job_id, submitted.output[-4000:]
        job = submitted.job_id

        wait_for_slots(cluster, job)
        replacement = cluster.start_taskmanager(wait=False)
        cluster.wait_for_checkpoints(job, 2, timeout=180)
        cluster.wait_for_taskmanager(replacement.resource_id)
        assert cluster.job(job)["state"] == "RUNNING"
        killed_at = time.monotonic()
        cluster.kill_taskmanager(0)
        # The kill landed: the rest of the input need not be paced.
        (tmp_path / "unpaced").touch()

        state = cluster.wait_for_job(job, timeout=400)
        took = time.monotonic() - killed_at
        checkpoints = cluster.checkpoints(job)
        failures = cluster.exceptions(job)
        assert state == "FINISHED", (state, failures[:1])

    # The kill must have hit the running job, which then restarted from a checkpoint (not from
    # the beginning, which would hide a sink that loses what it buffered).
    assert failures, "the job saw no failure: the kill came too late"
    restored = checkpoints["latest"]["restored"]
    assert restored is not None and restored["id"] >= 2, checkpoints["latest"]

    ids: list[int] = []
    for name in topics:
        ids += [json.loads(m.data)["id"] for m in pull_all(project, name, expect=COUNT // 2)]
    distinct = set(ids)
    lost = sorted(set(range(COUNT)) - distinct)
    print(
        f"\n{COUNT} records, {len(ids)} read back, {len(lost)} lost, "
        f"{len(ids) - len(distinct)} duplicates; {len(failures)} failure(s) recorded "
        f"({', '.join(sorted({str(f.get('exceptionName')) for f in failures}))}); "
        f"finished {took:.1f} s after the kill; restored checkpoint {restored['id']}"
    )
    assert not lost, f"{len(lost)} records lost, first {lost[:10]}"
    assert distinct == set(range(COUNT))
