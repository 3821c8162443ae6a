"""The README's first job: the code the README prints is ``examples/first_job.py``, and it runs
as printed against the emulator stack, reading back what it wrote."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyflink_gcp.tools.emulators import EmulatorStack
from tests.support.jobs import REPO_ROOT, child_environ

pytestmark = pytest.mark.e2e

EXAMPLE = Path(REPO_ROOT) / "examples" / "first_job.py"


def test_the_readme_prints_the_example_file() -> None:
    readme = (Path(REPO_ROOT) / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert EXAMPLE.read_text() in blocks


def test_the_first_job_runs_as_printed_and_reads_back_every_order(
    stack: EmulatorStack, tmp_path: Path
) -> None:
    env = child_environ(**stack.env)  # as a reader runs it: the installed package only
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts = dict(re.findall(r"^(orders-\w+): (\d+) messages$", done.stdout, flags=re.M))
    assert counts == {"orders-eu": "1000", "orders-us": "1000", "orders-asia": "1000"}, done.stdout
