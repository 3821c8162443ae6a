"""Every example on a standalone cluster, submitted with ``flink run -py`` at parallelism 4.

Each example checks what it reads back from its emulator and exits non-zero on a mismatch, and
``flink run`` passes the script's failure on as its own exit status, so exit status 0 means the
example wrote on the cluster what it writes on the MiniCluster. Nothing is installed on the
cluster for the job: the TaskManagers' Python workers run this virtualenv's interpreter
(``python.executable``), and the bridge jar goes with the job (``pipeline.jars``), which is
checked in each TaskManager's blob cache. The examples run with fewer records than their
defaults (a few thousand), which they accept as arguments.

Several minutes in all: not part of ``make test`` (``make cluster-test`` runs it).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflink_gcp.core import bridge
from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.cluster.conftest import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
PARALLELISM = 4

#: Each example with the arguments that keep it small.
EXAMPLES = {
    "pubsub_dynamic_topics.py": ["--orders", "4000"],
    "lineage_listener.py": ["--orders", "3000"],
    "bigquery_dynamic_tables.py": ["--orders", "4000"],
    "bigquery_tenant_tables.py": ["--orders", "4000"],
    "bigquery_file_loads.py": ["--readings", "4000"],
    "bigquery_results_to_tasks.py": ["--readings", "4000"],
    "bigtable_daily_tables.py": ["--count", "3000"],
    "cloudtasks_webhooks.py": ["--events", "2000"],
    "spanner_events.py": ["--count", "3000"],
    "sql_dynamic_tables.py": ["--orders", "3000"],
}


def test_every_example_is_listed() -> None:
    """A new example is run on the cluster too: demo.py's list is this one's."""
    from examples.demo import EXAMPLES as DEMO

    assert sorted(DEMO) == sorted(EXAMPLES)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, stack: EmulatorStack) -> Iterator[StandaloneCluster]:
    with running_cluster(request, stack) as started:
        yield started


def _is_bridge_jar(path: Path) -> bool:
    """Whether ``path`` is a copy of the bridge jar: a jar holding its marker operator.

    Not compared byte for byte with ``bridge.JAR``: a change to the bridge's sources rebuilds
    that file whenever a job is built, possibly after this job shipped its copy.
    """
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as jar:
        return bridge.MARKER_OPERATOR.replace(".", "/") + ".class" in jar.namelist()


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs_on_the_cluster(cluster: StandaloneCluster, script: str) -> None:
    done = cluster.submit(
        EXAMPLES_DIR / script,
        *EXAMPLES[script],
        "--parallelism",
        str(PARALLELISM),
        parallelism=PARALLELISM,
        timeout=600,
    )
    print(f"\n{script}: exit {done.returncode} in {done.seconds:.1f} s\n{done.output[-1500:]}")
    assert done.ok, f"{script} exited {done.returncode}:\n{done.output[-6000:]}"
    assert done.job_id is not None, done.output[-2000:]

    job = cluster.job(done.job_id)
    assert job["state"] == "FINISHED"
    assert max(vertex["parallelism"] for vertex in job["vertices"]) == PARALLELISM

    # The bridge jar travelled with the job to every TaskManager that ran its tasks.
    blobs = cluster.job_blobs(done.job_id)
    for taskmanager in cluster.taskmanagers:
        files = blobs.get(taskmanager.resource_id, [])
        assert any(_is_bridge_jar(f) for f in files), (
            f"no copy of the bridge jar in {taskmanager.resource_id}'s blob cache: {files}"
        )
