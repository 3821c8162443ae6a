"""A job started from a virtualenv that is not activated: its Python workers must not silently run
another interpreter.

The driver runs in a process of its own with the virtualenv's interpreter, a PATH without the
virtualenv and ``python.executable`` unset: Flink would start the workers with the PATH's
``python``, which lacks pyflink. Locally the sink gives the workers the driver's interpreter, so
the job runs. With ``python.executable`` naming an interpreter without pyflink (a cluster's
wrong setting), the job ends at once with a message naming the setting, instead of restarting
for as long as its restart strategy allows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import REPO_ROOT, child_environ

pytestmark = pytest.mark.e2e

JOB = textwrap.dedent(
    """
    import sys, time
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink_gcp.core.gateway import drain_gateway_stderr
    from tests.support.committing import StagingSink

    drain_gateway_stderr()
    conf = Configuration()
    if len(sys.argv) > 2:
        conf.set_string("python.executable", sys.argv[2])
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    env.enable_checkpointing(500)  # the default restart strategy then restarts without end
    ds = env.from_collection([{"i": i} for i in range(50)]).map(lambda r: r)
    ds.sink_to(StagingSink(sys.argv[1]))
    start = time.monotonic()
    try:
        env.execute("from an unactivated virtualenv")
        print("FINISHED")
    except Exception as exc:
        print("FAILED", "python.executable" in str(exc), "cannot import pyflink" in str(exc))
    print("SECONDS", round(time.monotonic() - start, 1))
    """
)


def run_driver(tmp_path: Path, *args: str) -> str:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()
    # Neither the virtualenv's bin nor its PYTHONPATH: as a user who did not activate it.
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent
    )
    # The test sink's module, not the workers' packages, on the PYTHONPATH.
    env = child_environ(PATH=path, PYTHONPATH=str(REPO_ROOT))
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [sys.executable, str(script), str(out), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_local_job_from_an_unactivated_virtualenv_runs_with_the_drivers_interpreter(
    tmp_path: Path,
) -> None:
    stdout = run_driver(tmp_path)
    assert "FINISHED" in stdout, stdout


def test_workers_that_cannot_import_pyflink_end_the_job_naming_python_executable(
    tmp_path: Path,
) -> None:
    base = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run(
        [str(base), "-c", "import pyflink"], capture_output=True, env=child_environ()
    )
    if not base.exists() or probe.returncode == 0:
        pytest.skip(f"no interpreter without pyflink at {base}")
    stdout = run_driver(tmp_path, str(base))
    assert "FAILED True True" in stdout, stdout
    seconds = float(stdout.split("SECONDS", 1)[1].split()[0])
    assert seconds < 60, stdout
