"""The parts of :class:`StandaloneCluster` that need no JVM: blob lookup, guards, job ids and
the bounded restart of TaskManagers that fail to start."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from pyflink_gcp.tools.cluster import ClusterError, StandaloneCluster
from pyflink_gcp.tools.cluster.config import ClusterPorts
from pyflink_gcp.tools.cluster.members import Slots
from pyflink_gcp.tools.cluster.standalone import _JOB_ID
from tests.unit.tools.cluster.test_members import FAILING_TASKMANAGER

JOB = "652fdf8a681bd0ab4c41a28850e82e64"


def test_job_blobs_names_the_process_holding_each_file(tmp_path: Path) -> None:
    cluster = StandaloneCluster(root=tmp_path)
    tmp = cluster.layout.tmp
    server = tmp / "jobmanager" / "blobStore-1" / f"job_{JOB}"
    cache = tmp / "taskmanager-2" / "tm_taskmanager-2" / "blobStorage" / f"job_{JOB}"
    other = tmp / "taskmanager-1" / "tm_taskmanager-1" / "blobStorage" / ("job_" + "0" * 32)
    for directory in (server, cache, other):
        directory.mkdir(parents=True)
        (directory / "blob_p-1").write_bytes(b"jar")
    assert cluster.job_blobs(JOB) == {
        "jobmanager": [server / "blob_p-1"],
        "taskmanager-2": [cache / "blob_p-1"],
    }


def test_a_cluster_not_started_refuses_work(tmp_path: Path) -> None:
    cluster = StandaloneCluster(root=tmp_path)
    with pytest.raises(ClusterError, match="not been started"):
        _ = cluster.rest_url
    with pytest.raises(ClusterError, match="not running"):
        cluster.submit(tmp_path / "job.py")
    cluster.stop()  # stopping what never started is harmless
    assert tmp_path.is_dir()  # a directory passed in is never removed


def test_the_job_id_is_read_from_the_clients_output() -> None:
    output = f"...\nJob has been submitted with JobID {JOB}\nProgram execution finished\n"
    match = _JOB_ID.search(output)
    assert match is not None and match.group(1) == JOB


def fake_home(tmp_path: Path, taskmanager: str) -> Path:
    """A FLINK_HOME whose ``bin/taskmanager.sh`` is ``taskmanager`` (a shell script)."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "taskmanager.sh").write_text(taskmanager)
    return home


def failing_cluster(tmp_path: Path) -> StandaloneCluster:
    cluster = StandaloneCluster(root=tmp_path / "cluster", start_timeout=30.0)
    cluster.home = fake_home(tmp_path, FAILING_TASKMANAGER)
    return cluster


def test_taskmanagers_that_fail_to_start_are_reported_tried_again_then_given_up(
    tmp_path: Path,
) -> None:
    cluster = failing_cluster(tmp_path)

    with pytest.raises(ClusterError) as raised:
        cluster.ensure_taskmanagers(1, tries=2)

    message = str(raised.value)
    assert message.startswith("0 of 1 TaskManagers running after 2 failed starts: ")
    assert message.count("exited with code 239") == 2
    assert "taskmanager-1 exited" in message and "taskmanager-2 exited" in message
    assert [tm.killed for tm in cluster.taskmanagers] == [True, True]
    assert cluster.live_taskmanagers() == []


class _JobManager(BaseHTTPRequestHandler):
    """Answers ``/taskmanagers`` with the TaskManagers named in ``registered``."""

    registered: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        listed = [{"id": i, "slotsNumber": 2, "freeSlots": 2} for i in self.registered]
        body = json.dumps({"taskmanagers": listed}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def jobmanager_rest() -> Iterator[int]:
    """The port of a REST endpoint that lists ``taskmanager-2`` as registered: where the
    second TaskManager started registers, after the first one died."""
    _JobManager.registered = ["taskmanager-2"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JobManager)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_replacement_that_dies_while_registering_is_reported_and_another_one_started(
    tmp_path: Path, jobmanager_rest: int
) -> None:
    # taskmanager-1 exits 239 while it registers; taskmanager-2 stays up and is listed.
    script = (
        'if [ "$FLINK_IDENT_STRING" = taskmanager-1 ]; then\n'
        + FAILING_TASKMANAGER
        + "fi\nexec sleep 60\n"
    )
    cluster = StandaloneCluster(root=tmp_path / "cluster", start_timeout=30.0)
    cluster.home = fake_home(tmp_path, script)
    cluster.ports = ClusterPorts(rpc=1, rest=jobmanager_rest, blob=1)
    try:
        failures = cluster.ensure_taskmanagers(1)

        assert len(failures) == 1
        assert failures[0].startswith("taskmanager-1 exited with code 239")
        assert "broken on purpose" in failures[0]
        assert [tm.resource_id for tm in cluster.live_taskmanagers()] == ["taskmanager-2"]
        assert cluster.slots() == Slots(taskmanagers=1, total=2, free=2)
        assert cluster.ensure_taskmanagers(1) == []  # enough: nothing started
        assert len(cluster.taskmanagers) == 2
    finally:
        for taskmanager in cluster.taskmanagers:
            taskmanager.process.stop(1.0)
