"""``pyflink-gcp emulators``: service names, and the restart requests between ``restart`` and
``up`` (a stack stand-in records the restarts; the real stack is in tests/integration)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyflink_gcp.tools.emulators import ALL_SERVICES, EmulatorError, commands


def test_services_come_space_or_comma_separated_once_each() -> None:
    assert commands.parse_services(None) == ALL_SERVICES
    assert commands.parse_services(["pubsub,spanner", "pubsub", " gcs "]) == (
        "pubsub",
        "spanner",
        "gcs",
    )
    with pytest.raises(SystemExit, match="unknown service.*pubsb; choose from pubsub"):
        commands.parse_services(["pubsb"])


class RestartingStack:
    """Records the restarts asked of it; ``broken`` services fail to come back."""

    def __init__(self, broken: set[str]) -> None:
        self.broken = broken
        self.restarted: list[str] = []

    def restart(self, service: str) -> None:
        if service in self.broken:
            raise EmulatorError(f"{service} did not come back")
        self.restarted.append(service)


def test_up_carries_out_each_request_and_answers_it(tmp_path: Path) -> None:
    for service in ("spanner", "bigtable"):
        (tmp_path / f"restart-{service}").write_text("")
    stack = RestartingStack(broken={"bigtable"})
    dead = {"spanner", "bigtable"}
    commands.serve_restarts(stack, tmp_path, dead)  # type: ignore[arg-type]
    assert stack.restarted == ["spanner"]
    assert dead == {"bigtable"}  # still dead: its restart failed
    assert (tmp_path / "restart-spanner.result").read_text().startswith("ok: spanner restarted")
    assert (tmp_path / "restart-bigtable.result").read_text() == (
        "error: bigtable did not come back"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "restart-bigtable.result",
        "restart-spanner.result",
    ]


def test_restart_names_what_it_cannot_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "control_root", lambda: tmp_path)
    assert commands.restart("receiver", None, 1.0) == 2
    assert "cannot restart 'receiver'" in capsys.readouterr().err
    assert commands.restart("pubsub", None, 1.0) == 1
    assert "exactly one running `pyflink-gcp emulators up` (found: none" in capsys.readouterr().err


def test_restart_reads_the_answer_of_the_running_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """This process stands in for the running ``up``: its answer is written before the ask."""
    monkeypatch.setattr(commands, "control_root", lambda: tmp_path)
    control = tmp_path / str(os.getpid())
    control.mkdir()
    real_replace = Path.replace

    def answer_on_request(self: Path, target: Path) -> Path:
        moved = real_replace(self, target)
        if Path(target).name == "restart-pubsub":
            (control / "restart-pubsub.result").write_text("ok: pubsub restarted in 0.1 s")
        return moved

    monkeypatch.setattr(Path, "replace", answer_on_request)
    assert commands.restart("pubsub", os.getpid(), 5.0) == 0
    assert "ok: pubsub restarted" in capsys.readouterr().out
    assert (control / "restart-pubsub").exists()  # the request, for `up` to take
    assert not (control / "restart-pubsub.result").exists()  # the answer was consumed
