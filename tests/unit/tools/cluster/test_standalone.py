"""The parts of :class:`StandaloneCluster` that need no JVM: blob lookup, guards, job ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflink_gcp.tools.cluster import ClusterError, StandaloneCluster
from pyflink_gcp.tools.cluster.standalone import _JOB_ID

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
