"""``pyflink-gcp cluster``: its state files, the emulators' variables, ``--env``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyflink_gcp.cli import main
from pyflink_gcp.tools.cluster import ClusterError
from pyflink_gcp.tools.cluster.commands import emulator_env, parse_env, running_clusters


def _dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_parse_env_takes_name_value_pairs() -> None:
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        parse_env(["oops"])


def test_running_clusters_drops_stale_state_files(tmp_path: Path) -> None:
    alive = {"pid": os.getpid(), "rest_url": "http://127.0.0.1:1"}
    (tmp_path / f"{os.getpid()}.json").write_text(json.dumps(alive))
    stale = tmp_path / "1.json"
    stale.write_text(json.dumps({"pid": _dead_pid(), "rest_url": "http://127.0.0.1:2"}))
    (tmp_path / "broken.json").write_text("{")
    assert running_clusters(tmp_path) == [alive]
    assert not stale.exists()


def test_emulator_env_reads_the_running_emulators_up(tmp_path: Path) -> None:
    control = tmp_path / str(os.getpid())
    control.mkdir()
    (control / "env.json").write_text(json.dumps({"PUBSUB_EMULATOR_HOST": "127.0.0.1:9"}))
    (tmp_path / str(_dead_pid())).mkdir()  # an `emulators up` that ended
    assert emulator_env(root=tmp_path) == {"PUBSUB_EMULATOR_HOST": "127.0.0.1:9"}
    assert emulator_env(os.getpid(), root=tmp_path) == {"PUBSUB_EMULATOR_HOST": "127.0.0.1:9"}


def test_emulator_env_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"exactly one running .*found: none"):
        emulator_env(root=tmp_path)
    (tmp_path / str(os.getpid())).mkdir()
    with pytest.raises(ClusterError, match="has not published its variables"):
        emulator_env(root=tmp_path)


def test_cluster_down_without_a_running_up_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYFLINK_GCP_CACHE", str(tmp_path))
    assert main(["cluster", "down"]) == 1
    assert "exactly one running `pyflink-gcp cluster up` (found: none" in capsys.readouterr().err


def test_cluster_up_without_emulators_up_fails_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYFLINK_GCP_CACHE", str(tmp_path))
    assert main(["cluster", "up", "--env-from-emulators"]) == 1
    assert "needs exactly one running `pyflink-gcp emulators up`" in capsys.readouterr().err
