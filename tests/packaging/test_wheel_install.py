"""The package as a pip user gets it: a wheel built from the repo, installed into a clean venv.

The sdist must carry ``java-bridge/`` (and no jar of this machine's build), the wheel built from
it must carry the Java bridge jar (``setup.py`` compiles it), and an example job run from
that venv, against the Pub/Sub emulator, must use it: no "bridge unavailable" warning, and the
example's own check (every order delivered, per-customer order kept) passes. The venv is made
from nothing but the wheel and its extras, so a module or a jar that exists only in the source
tree fails here. The versions are the tested ones (``constraints.txt``); that the ranges alone
resolve quickly is measured by ``make resolve-time``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest

from pyflink_gcp.tools.emulators import EmulatorStack

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pubsub_dynamic_topics.py"
JAR_IN_WHEEL = "pyflink_gcp/jars/pyflink-gcp-bridge.jar"
SOURCE_IN_SDIST = (
    "java-bridge/src/main/java/dev/pyflinkgcp/bridge/CheckpointMarkerProcessOperator.java"
)
BRIDGE_WARNING = "Java bridge unavailable"


def _clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the repository: the jobs run
    earlier in the same test session put the repository on ``PYTHONPATH``, which would make the
    clean venv import the repository's package instead of the installed wheel."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "_python_worker_execution_mode")
    }


def _run(command: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs a command, failing the test with its output when it fails or overruns."""
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **{"env": _clean_env(), **kwargs},  # type: ignore[arg-type]
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{command[:4]} did not finish within {timeout:.0f}s:\n{exc.stdout}\n{exc.stderr}"
        )
    if done.returncode != 0:
        pytest.fail(f"{command[:4]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def _require_build_tools() -> None:
    if shutil.which("javac", path=_java_path()) is None:
        pytest.skip(
            "no JDK (javac): the wheel cannot be built here, it must contain the bridge jar"
        )
    if importlib.util.find_spec("build") is None:
        pytest.skip("the 'build' package is not installed (it is in the dev extra: make setup)")


def _java_path() -> str:
    java_home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return os.pathsep.join([str(Path(java_home) / "bin"), path]) if java_home else path


def test_wheel_in_a_clean_venv_runs_an_example_with_the_bridge(
    stack: EmulatorStack, tmp_path: Path
) -> None:
    _require_build_tools()
    dist = tmp_path / "dist"
    started = time.monotonic()
    # The sdist first, then the wheel from the sdist (no jar in it): the jar is compiled anew.
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], 300)
    sdist = next(dist.glob("pyflink_gcp-*.tar.gz"))
    with tarfile.open(sdist) as contents:
        names = contents.getnames()
    assert any(name.endswith(SOURCE_IN_SDIST) for name in names), f"{sdist.name}: no java-bridge/"
    assert not any(name.endswith(".jar") for name in names), f"{sdist.name} ships a built jar"
    wheel = next(dist.glob("pyflink_gcp-*.whl"))
    with zipfile.ZipFile(wheel) as contents:
        assert JAR_IN_WHEEL in contents.namelist(), f"{wheel.name} has no {JAR_IN_WHEEL}"
    built = time.monotonic()

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            "-c",
            str(ROOT / "constraints.txt"),
            f"{wheel}[all]",
        ],
        600,
    )
    installed = time.monotonic()

    # The example runs from a directory of its own, so only the installed package is importable.
    workdir = tmp_path / "job"
    workdir.mkdir()
    script = workdir / EXAMPLE.name
    shutil.copyfile(EXAMPLE, script)
    where = _run(
        [str(python), "-c", "import pyflink_gcp.core.bridge as b; print(b.JAR, b.JAR.is_file())"],
        60,
        cwd=workdir,
    ).stdout.split()
    assert where[0].startswith(str(env_dir)) and where[1] == "True", where

    job = _run(
        [
            str(python),
            str(script),
            "--project",
            stack.project,
            "--orders",
            "2000",
            "--parallelism",
            "1",
        ],
        300,
        cwd=workdir,
        env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"},
    )
    output = job.stdout + job.stderr
    ran = time.monotonic()
    print(
        f"sdist and wheel built in {built - started:.0f}s, installed with [all] in {installed - built:.0f}s, "
        f"example job in {ran - installed:.0f}s"
    )
    assert BRIDGE_WARNING not in output, output
    assert "OK: every order delivered, per-customer order kept" in output, output
