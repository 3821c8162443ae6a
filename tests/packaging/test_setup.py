"""The wheel build hook (``setup.py``): it compiles the bridge jar, or stops the build saying why.

The full isolated build, and the wheel in use, are in ``test_wheel_install.py``; these run the
hook alone, in a copy of the tree that has no jar yet, as a build from the sdist does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN_HOOK = """
import runpy
from setuptools import Distribution
hook = runpy.run_path("setup.py")["BuildPyWithBridge"]
command = hook(Distribution({"name": "pyflink-gcp", "packages": []}))
command.ensure_finalized()
command.run()
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """What the sdist holds of the build: setup.py, the package's bridge modules, the SQL
    connectors' option list (the build generates the jar's option resource from it),
    java-bridge/."""
    shutil.copyfile(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copytree(ROOT / "java-bridge" / "src", tmp_path / "java-bridge" / "src")
    for package, names in (
        ("core", ("errors.py", "bridge.py")),
        ("tools", ("bridge_build.py",)),
        ("table", ("options.py", "option_groups.py", "option_model.py")),
    ):
        directory = tmp_path / "pyflink_gcp" / package
        directory.mkdir(parents=True)
        for name in names:
            shutil.copyfile(ROOT / "pyflink_gcp" / package / name, directory / name)
    return tmp_path


def _hook(tree: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_HOOK],
        cwd=tree,
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_a_jdk_the_build_stops_naming_the_jdk(tree: Path) -> None:
    done = _hook(tree, path="")

    assert done.returncode != 0
    assert "cannot build the Java bridge jar the wheel must contain" in done.stderr, done.stderr
    assert "Install a JDK 11 or newer" in done.stderr
    assert not (tree / "pyflink_gcp" / "jars" / "pyflink-gcp-bridge.jar").exists()


def test_with_a_jdk_the_hook_compiles_the_jar_into_the_package(tree: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no JDK (javac) on PATH: nothing to compile with")

    done = _hook(tree, path=str(Path(javac).parent))

    assert done.returncode == 0, done.stderr
    jar = tree / "pyflink_gcp" / "jars" / "pyflink-gcp-bridge.jar"
    with zipfile.ZipFile(jar) as contents:
        assert "dev/pyflinkgcp/bridge/CheckpointMarkerProcessOperator.class" in contents.namelist()
    assert (tree / "build" / "lib" / "pyflink_gcp" / "jars" / jar.name).is_file()
