"""``pyflink-gcp sql-client -f script.sql``: Flink's SQL client from the wheel, read back.

The command runs as a user runs it (a subprocess of the installed console entry point), with the
SQL of ``docs/sql.md``; the client inherits the emulator variables of the session's stack (its
MiniCluster's Python workers inherit the client's environment). The first run may download the
SQL gateway jar into the tools cache; later runs find it there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyflink_gcp.tools import sql_client
from pyflink_gcp.tools.emulators.stack import EmulatorStack
from tests.integration.bigtable.support import read_table
from tests.support.endpoints import refusing_endpoint
from tests.support.pubsub import make_topics, pull_all, unique

pytestmark = pytest.mark.e2e

REGIONS = ("eu", "us")
#: The console entry point pip installs beside the interpreter.
COMMAND = Path(sys.executable).with_name("pyflink-gcp")


def _sql_client(script: Path, tmp_path: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    # The loopback mode of the test process's own PyFlink jobs must not reach the client's.
    env = {k: v for k, v in os.environ.items() if k != "_python_worker_execution_mode"}
    env.update(extra_env)
    env["FLINK_LOG_DIR"] = str(tmp_path / "log")
    return subprocess.run(
        [str(COMMAND), "sql-client", "-f", str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _log_errors(tmp_path: Path) -> str:
    """The ERROR and WARN lines and causes of the client's log, at most 40."""
    lines = [
        line
        for log in sorted((tmp_path / "log").glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if " ERROR " in line or " WARN " in line or line.startswith(("Caused by:", "pyflink_gcp"))
    ]
    return "\n".join(lines[-40:])


def test_a_script_writes_to_pubsub_and_bigtable_through_the_wheels_sql_client(
    stack: EmulatorStack, tmp_path: Path
) -> None:
    project = stack.project
    prefix, instance = unique("client"), unique("client")
    make_topics(project, [f"{prefix}-{region}" for region in REGIONS])
    # One statement set: both tables in one job, which the client waits for (one job's
    # start-up instead of two).
    script = tmp_path / "script.sql"
    script.write_text(
        f"""
CREATE TABLE events (id BIGINT, region STRING) WITH (
  'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{prefix}-{{region}}');
CREATE TABLE cells (id STRING, region STRING, n BIGINT) WITH (
  'connector' = 'gcp-bigtable', 'project' = '{project}', 'instance' = '{instance}',
  'table' = 'cells_{{region}}', 'row-key' = 'id', 'column-family' = 'cf',
  'create-disposition' = 'create-if-needed');
EXECUTE STATEMENT SET BEGIN
INSERT INTO events VALUES (1, 'eu'), (2, 'us'), (3, 'eu');
INSERT INTO cells VALUES ('k1', 'eu', 10), ('k2', 'us', 20);
END;
"""
    )
    done = _sql_client(script, tmp_path)
    if done.returncode != 0:
        # In full: pytest's repr of a long tuple cuts the client's answer and the root cause
        # the command prints from the client's log.
        pytest.fail(
            f"sql-client exited with {done.returncode}\n--- stdout:\n{done.stdout[-4000:]}\n"
            f"--- stderr:\n{done.stderr[-4000:]}\n--- the log's errors:\n{_log_errors(tmp_path)}"
        )

    got = {region: pull_all(project, f"{prefix}-{region}", expect=2) for region in REGIONS}
    assert sorted(json.loads(m.data)["id"] for m in got["eu"]) == [1, 3]
    assert [json.loads(m.data) for m in got["us"]] == [{"id": 2, "region": "us"}]
    eu, us = (read_table(instance, f"cells_{r}") for r in REGIONS)
    assert {q: [v for _, v in cells] for q, cells in eu[b"k1"].items()} == {
        ("cf", b"region"): [b"eu"],
        ("cf", b"n"): [b"10"],
    }
    assert list(us) == [b"k2"]


def test_a_failed_statement_fails_the_command_and_the_cached_jar_needs_no_network(
    tmp_path: Path,
) -> None:
    """With the gateway jar in the cache, an unreachable repository changes nothing; a
    statement that fails planning makes the exit status 1 (Flink's client says 0)."""
    sql_client.fetch(sql_client.gateway_artifact(sql_client.wheel_flink().version))
    script = tmp_path / "bad.sql"
    script.write_text(
        "CREATE TABLE events (id BIGINT, region STRING) WITH ('connector' = 'gcp-pubsub', "
        "'project' = 'p', 'topic' = 'events-{region}', 'sink.buffer-flush.interval' = 'soon');\n"
        "INSERT INTO events VALUES (1, 'eu');\n"
    )
    done = _sql_client(
        script, tmp_path, PYFLINK_GCP_MAVEN_REPOSITORY=f"http://{refusing_endpoint()}/maven2"
    )
    assert done.returncode == 1, (done.stdout[-4000:], done.stderr[-4000:])
    assert "cannot download" not in done.stderr
    assert (
        "Invalid value for option 'sink.buffer-flush.interval' of connector 'gcp-pubsub'"
    ) in done.stdout + done.stderr
