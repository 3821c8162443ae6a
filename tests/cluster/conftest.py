"""Fixtures of the standalone-cluster tests: one cluster at a time, logs kept on failure."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack


@contextmanager
def running_cluster(
    request: pytest.FixtureRequest, stack: EmulatorStack
) -> Iterator[StandaloneCluster]:
    """A cluster of two TaskManagers of two slots whose processes see the emulators.

    Its directory (configuration, every process's log, checkpoints) is kept and named when a
    test of the session failed.
    """
    failed_before = request.session.testsfailed
    cluster = StandaloneCluster(env=stack.env)
    with cluster:
        try:
            yield cluster
        finally:
            cluster.keep_logs = request.session.testsfailed > failed_before or None
    kept = cluster.logs_kept()
    if kept is not None:
        print(f"\nFlink cluster logs kept in {kept}")
