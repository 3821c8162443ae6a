"""The README's first job: the code the README prints is ``examples/first_job.py``, and it runs
as printed against the emulator stack, reading back what it wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyflink_gcp.emulators import EmulatorStack
from tests.support.jobs import REPO_ROOT

pytestmark = pytest.mark.e2e

EXAMPLE = Path(REPO_ROOT) / "examples" / "first_job.py"


def test_the_readme_prints_the_example_file() -> None:
    readme = (Path(REPO_ROOT) / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert EXAMPLE.read_text() in blocks


def test_the_first_job_runs_as_printed_and_reads_back_every_order(
    stack: EmulatorStack, tmp_path: Path
) -> None:
    # As a reader runs it: the installed package only, and nothing PyFlink left in this test
    # process's environment (PYFLINK_GATEWAY_DISABLED would stop the driver's gateway).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")}
    env.update(stack.env)
    env.pop("PYTHONPATH", None)
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
