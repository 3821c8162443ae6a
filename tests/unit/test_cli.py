"""``pyflink-gcp --version``."""

from __future__ import annotations

from importlib import metadata

import pytest

import pyflink_gcp
from pyflink_gcp import cli


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"pyflink-gcp {metadata.version('pyflink-gcp')}\n"


def test_version_falls_back_to_the_package_version_when_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cli.version() == pyflink_gcp.__version__
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out == f"pyflink-gcp {pyflink_gcp.__version__}\n"


def test_plan_help_states_the_exit_status_in_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["plan", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "``" not in shown and "pyflink-gcp plan: a dry run" in shown
    assert "exit status: 1 when the sink would fail the job" in " ".join(shown.split())
