"""The fault suite's slot check: when a job cannot be seated, the suite says "not enough slots:
N of M" (and which jobs hold the rest) instead of waiting out a timeout and counting the
input the job never handed as lost."""

from __future__ import annotations

from pyflink_gcp.tools.cluster.standalone import Slots
from tests.faults.inject import shortage

ORPHAN = "2a4908f58a7d7877e43e003613801cb2"


def test_a_job_left_running_by_an_earlier_run_leaves_a_restore_at_4_two_slots() -> None:
    # Two TaskManagers of two slots; a parallelism-2 job an earlier run left behind holds two.
    slots = Slots(taskmanagers=2, total=4, free=2)

    assert shortage(slots, 4, {ORPHAN: 2}) == (
        "not enough slots: 2 of 4 (2 live TaskManagers registered with 4 slots; "
        f"job {ORPHAN} holds 2)"
    )
    assert shortage(slots, 2, {ORPHAN: 2}) is None


def test_a_taskmanager_missing_leaves_a_job_at_4_two_slots() -> None:
    slots = Slots(taskmanagers=1, total=2, free=2)

    assert shortage(slots, 4, {}) == (
        "not enough slots: 2 of 4 (1 live TaskManagers registered with 2 slots)"
    )


def test_a_whole_cluster_seats_the_job() -> None:
    assert shortage(Slots(taskmanagers=2, total=4, free=4), 4, {}) is None
    assert shortage(Slots(taskmanagers=0, total=0, free=0), 1, {ORPHAN: 3}) == (
        f"not enough slots: 0 of 1 (0 live TaskManagers registered with 0 slots; job {ORPHAN} "
        "holds 3)"
    )
