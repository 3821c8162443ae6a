"""The cluster's parts as values: slot counts and the report of how a TaskManager ended."""

from __future__ import annotations

from pathlib import Path

from pyflink_gcp.tools.cluster.members import Slots, TaskManager, free_slots
from pyflink_gcp.tools.emulators.processes import ManagedProcess

#: What a TaskManager that dies while it registers prints (its console log), then its exit.
FAILING_TASKMANAGER = """\
echo "INFO  TaskManagerRunner - Starting TaskManager"
echo "ERROR FatalExitExceptionHandler - FATAL: Thread 'flink-io-1' produced an uncaught exception."
echo "java.lang.IllegalStateException: broken on purpose"
echo "	at org.apache.flink.SomeException.method(SomeException.java:1)"
echo "INFO  CoordinatedShutdown - Running CoordinatedShutdown"
exit 239
"""


def test_free_slots_counts_only_the_live_taskmanagers_the_jobmanager_lists() -> None:
    listed = [
        {"id": "taskmanager-1", "slotsNumber": 2, "freeSlots": 0},
        {"id": "taskmanager-2", "slotsNumber": 2, "freeSlots": 2},  # killed, not yet timed out
        {"id": "taskmanager-3", "slotsNumber": 2, "freeSlots": 1},
    ]
    assert free_slots(listed, {"taskmanager-1", "taskmanager-3", "taskmanager-4"}) == Slots(
        taskmanagers=2, total=4, free=1
    )
    assert free_slots([], {"taskmanager-1"}) == Slots(taskmanagers=0, total=0, free=0)


def test_an_exit_report_gives_the_code_its_meaning_and_the_lines_naming_the_error(
    tmp_path: Path,
) -> None:
    log = tmp_path / "taskmanager-1.out"
    process = ManagedProcess("taskmanager-1", ["bash", "-c", FAILING_TASKMANAGER], log_path=log)
    taskmanager = TaskManager("taskmanager-1", process)
    process.popen.wait(timeout=30)

    report = taskmanager.exit_report()

    assert report is not None
    assert report.startswith("taskmanager-1 exited with code 239 (Flink's exit (-17) after an")
    assert f"log {log}" in report
    assert "FATAL: Thread 'flink-io-1' produced an uncaught exception." in report
    assert "IllegalStateException: broken on purpose" in report
    assert "SomeException.method" not in report  # stack frames say nothing the lines above don't
    assert "Running CoordinatedShutdown" in report  # the last lines come too


def test_a_running_taskmanager_has_no_exit_report(tmp_path: Path) -> None:
    process = ManagedProcess(
        "taskmanager-1", ["sleep", "30"], log_path=tmp_path / "taskmanager-1.out"
    )
    try:
        assert TaskManager("taskmanager-1", process).exit_report() is None
    finally:
        process.stop(1.0)
