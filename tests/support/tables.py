"""Helpers for Table API / SQL jobs in tests: a table environment ready for the connectors, and
the planning error of a statement."""

from __future__ import annotations

import os
import signal
import sys
import sysconfig

from pyflink.table import EnvironmentSettings, TableEnvironment

from pyflink_gcp.table import register
from tests.support.jobs import REPO_ROOT
from tests.support.restore import Failover
from tests.support.waiting import wait_for


def make_table_env(
    parallelism: int = 2, *, checkpoint_ms: int | None = None, extra: dict[str, str] | None = None
) -> TableEnvironment:
    """A streaming TableEnvironment on the MiniCluster, with the connectors registered.

    Python workers run as processes (as on a cluster), a failure ends the job at once
    (``restart-strategy.type=none``), and the workers import this repository and the venv.
    """
    site = sysconfig.get_paths()["purelib"]
    paths = [REPO_ROOT, site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # PyFlink reads the worker mode from this variable when the job is submitted.
    os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112
    settings = EnvironmentSettings.new_instance().in_streaming_mode().build()
    t_env = TableEnvironment.create(settings)
    config = t_env.get_config()
    config.set("python.executable", sys.executable)
    config.set("python.client.executable", sys.executable)
    config.set("restart-strategy.type", "none")
    config.set("parallelism.default", str(parallelism))
    if checkpoint_ms is not None:
        config.set("execution.checkpointing.interval", f"{checkpoint_ms} ms")
    for key, value in (extra or {}).items():
        config.set(key, value)
    register(t_env)
    return t_env


def planning_error(t_env: TableEnvironment, statement: str) -> str:
    """The message of the error planning ``statement`` raises (it must raise)."""
    try:
        result = t_env.execute_sql(statement)
    except Exception as exc:  # noqa: BLE001 - py4j errors carry the Java trace as text
        return str(exc)
    result.get_job_client().cancel()
    raise AssertionError(f"planning {statement!r} did not fail")


def python_workers() -> dict[int, str]:
    """The test's PyFlink Python worker processes (pid: command line), from /proc: the
    descendants of this process that run PyFlink's Beam worker (pyflink-udf-runner.sh starts
    it; only ours are ever signalled)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                commands[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return {
        p: c for p, c in commands.items() if "pyflink.fn_execution.beam.beam_boot" in c and ours(p)
    }


def failover_table_env(failover: Failover, rows: int, rows_per_second: int) -> TableEnvironment:
    """A parallelism-1 table environment checkpointing every 500 ms under ``failover``, with
    three restarts, and a ``source`` table of the ids 1..``rows`` at ``rows_per_second``."""
    t_env = make_table_env(
        parallelism=1,
        checkpoint_ms=500,
        extra={
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "3",
            "restart-strategy.fixed-delay.delay": "1 s",
            **failover.conf(),
        },
    )
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE source (id BIGINT) WITH ('connector' = 'datagen', "
        f"'rows-per-second' = '{rows_per_second}', 'number-of-rows' = '{rows}', "
        f"'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{rows}')"
    )
    return t_env


def kill_the_python_worker(earlier: set[int]) -> tuple[int, int]:
    """SIGKILL the job's one Python worker (those in ``earlier`` belong to earlier jobs) and
    wait for its replacement; the two pids."""
    workers = wait_for(lambda: set(python_workers()) - earlier, "the job's Python worker")
    assert len(workers) == 1, workers
    (victim,) = workers
    os.kill(victim, signal.SIGKILL)
    replacement = wait_for(
        lambda: sorted(set(python_workers()) - earlier - {victim}), "a replacement worker"
    )
    return victim, replacement[0]
