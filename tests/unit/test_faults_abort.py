"""The fault suite's clean-up after an aborted target: no job of it outlives the abort."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults import __main__ as suite
from tests.faults.report import Outcome
from tests.faults.targets import TARGETS


class _Cluster:
    """The REST answers ``jobs_holding_slots`` reads: one job ended, one still running."""

    def jobs(self) -> list[dict[str, Any]]:
        return [{"jid": "done", "state": "FINISHED"}, {"jid": "left", "state": "RUNNING"}]

    def job(self, job_id: str) -> dict[str, Any]:
        return {"vertices": [{"parallelism": 2}]}


def test_a_job_left_running_by_an_abort_is_cancelled_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cancelled: list[str] = []
    settled: list[bool] = []
    monkeypatch.setattr(suite, "http_cancel", lambda cluster, job: cancelled.append(job))
    monkeypatch.setattr(suite, "settle", lambda cluster, ended: settled.append(True))
    outcome = Outcome(TARGETS["pubsub"][0])

    suite.cancel_leftovers(_Cluster(), outcome)  # type: ignore[arg-type]

    assert cancelled == ["left"]
    assert settled == [True]
    assert outcome.run_problems == ["job left still ran after the abort: cancelled"]


def test_a_failed_clean_up_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cluster: object, job: str) -> None:
        raise OSError("connection refused")

    monkeypatch.setattr(suite, "http_cancel", refuse)
    outcome = Outcome(TARGETS["pubsub"][0])

    suite.cancel_leftovers(_Cluster(), outcome)  # type: ignore[arg-type]

    assert outcome.unfinished == ["clean-up after the abort: OSError: connection refused"]
