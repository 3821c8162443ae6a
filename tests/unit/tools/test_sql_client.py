"""``pyflink-gcp sql-client``: the wheel's distribution, the cached download, the command line.

Downloads come from a Maven-layout directory under ``tmp_path`` (a ``file://`` repository), so
nothing here needs the network; the end-to-end run is ``tests/e2e/table/test_sql_client.py``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path

import pytest

from pyflink_gcp import cli
from pyflink_gcp.tools import sql_client
from pyflink_gcp.tools.sql_client import Artifact, SqlClientError, WheelFlink
from tests.support.endpoints import refusing_endpoint

ARTIFACT = Artifact("org.apache.flink", "flink-sql-gateway", "9.9.9")
BODY = b"PK\x03\x04 not really a jar, but bytes with a checksum"


def _publish(root: Path, artifact: Artifact, body: bytes, sha1: str | None = None) -> str:
    """Puts ``body`` and its ``.sha1`` into a Maven-layout directory; returns its URL."""
    jar = root / artifact.path
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.write_bytes(body)
    checksum = sha1 or hashlib.sha1(body, usedforsecurity=False).hexdigest()
    jar.with_name(jar.name + ".sha1").write_text(f"{checksum}  {jar.name}\n")
    return root.as_uri()


def _fake_home(root: Path, version: str = "9.9.9") -> Path:
    """A directory shaped like the wheel's ``pyflink/``: the files the command looks at."""
    home = root / "pyflink"
    for name in (
        f"lib/flink-dist-{version}.jar",
        f"opt/flink-sql-client-{version}.jar",
        f"opt/flink-python-{version}.jar",
    ):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_bytes(b"jar")
    (home / "bin").mkdir()
    (home / "bin" / "sql-client.sh").write_text("#!/bin/sh\n")
    return home


def test_the_installed_wheel_is_found_with_its_flink_version() -> None:
    import pyflink

    flink = sql_client.wheel_flink()
    assert flink.home == Path(pyflink.__file__).resolve().parent
    assert (flink.home / "lib" / f"flink-dist-{flink.version}.jar").is_file()
    assert flink.script.is_file()
    assert flink.opt_jar("flink-sql-client").is_file()


def test_a_directory_without_exactly_one_flink_dist_jar_is_refused(tmp_path: Path) -> None:
    home = _fake_home(tmp_path)
    (home / "lib" / "flink-dist-9.9.8.jar").write_bytes(b"jar")
    with pytest.raises(
        SqlClientError, match=r"exactly one lib/flink-dist-\*\.jar \(found: 9\.9\.8, 9\.9\.9\)"
    ):
        sql_client.wheel_flink(home)
    (home / "lib" / "flink-dist-9.9.8.jar").unlink()
    (home / "bin" / "sql-client.sh").unlink()
    with pytest.raises(SqlClientError, match="lacks bin/sql-client.sh"):
        sql_client.wheel_flink(home)


def test_the_gateway_jar_is_the_wheels_version_at_its_maven_path() -> None:
    artifact = sql_client.gateway_artifact("2.3.0")
    assert str(artifact) == "org.apache.flink:flink-sql-gateway:2.3.0"
    assert artifact.path == "org/apache/flink/flink-sql-gateway/2.3.0/flink-sql-gateway-2.3.0.jar"


def test_a_jar_is_downloaded_once_checked_and_then_served_from_the_cache(tmp_path: Path) -> None:
    repo = _publish(tmp_path / "repo", ARTIFACT, BODY)
    cache = tmp_path / "cache"
    jar = sql_client.fetch(ARTIFACT, cache, repo=repo)
    assert jar == cache / "maven" / ARTIFACT.path
    assert jar.read_bytes() == BODY
    assert (
        jar.with_name(jar.name + ".sha1").read_text().strip()
        == hashlib.sha1(BODY, usedforsecurity=False).hexdigest()
    )
    # The repository is gone: the cached jar is used as it is.
    unreachable = f"http://{refusing_endpoint()}/maven2"
    assert sql_client.fetch(ARTIFACT, cache, repo=unreachable) == jar
    assert sorted(p.name for p in jar.parent.iterdir()) == [jar.name, jar.name + ".sha1"]


def test_a_damaged_cached_jar_is_downloaded_again(tmp_path: Path) -> None:
    repo = _publish(tmp_path / "repo", ARTIFACT, BODY)
    cache = tmp_path / "cache"
    jar = sql_client.fetch(ARTIFACT, cache, repo=repo)
    jar.write_bytes(BODY[:10])
    assert sql_client.fetch(ARTIFACT, cache, repo=repo).read_bytes() == BODY


def test_a_jar_that_does_not_match_its_checksum_is_refused_and_not_kept(tmp_path: Path) -> None:
    repo = _publish(tmp_path / "repo", ARTIFACT, BODY, sha1="0" * 40)
    cache = tmp_path / "cache"
    with pytest.raises(
        SqlClientError, match=r"does not match its checksum \(SHA-1 [0-9a-f]{40}, expected 0{40}\)"
    ):
        sql_client.fetch(ARTIFACT, cache, repo=repo)
    assert list((cache / "maven" / ARTIFACT.path).parent.iterdir()) == []


def test_a_checksum_file_without_a_checksum_is_refused(tmp_path: Path) -> None:
    repo = _publish(tmp_path / "repo", ARTIFACT, BODY)
    sha1 = tmp_path / "repo" / (ARTIFACT.path + ".sha1")
    sha1.write_text("<html>not found</html>")
    with pytest.raises(SqlClientError, match="holds no SHA-1 checksum"):
        sql_client.fetch(ARTIFACT, tmp_path / "cache", repo=repo)


def test_an_unreachable_repository_says_what_to_do_offline(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(SqlClientError) as failed:
        sql_client.fetch(ARTIFACT, cache, repo=f"http://{refusing_endpoint()}/maven2", timeout_s=5)
    message = str(failed.value)
    assert message.startswith(
        "cannot download org.apache.flink:flink-sql-gateway:9.9.9 from http://"
    )
    assert f"put the jar at {cache / 'maven' / ARTIFACT.path}" in message
    assert "PYFLINK_GCP_MAVEN_REPOSITORY" in message


def test_the_opt_overlay_links_the_wheels_jars_and_the_extra_ones(tmp_path: Path) -> None:
    flink = WheelFlink(_fake_home(tmp_path), "9.9.9")
    gateway = tmp_path / "flink-sql-gateway-9.9.9.jar"
    gateway.write_bytes(b"jar")
    opt = sql_client.opt_overlay(flink, [gateway], tmp_path / "cache")
    links = {p.name: p.resolve() for p in opt.iterdir()}
    assert links == {
        "flink-python-9.9.9.jar": flink.opt / "flink-python-9.9.9.jar",
        "flink-sql-client-9.9.9.jar": flink.opt / "flink-sql-client-9.9.9.jar",
        "flink-sql-gateway-9.9.9.jar": gateway,
    }
    assert all((opt / name).is_symlink() for name in links)
    # A second preparation without the extra jar drops its link; the directory is the same.
    assert sql_client.opt_overlay(flink, [], tmp_path / "cache") == opt
    assert sorted(p.name for p in opt.iterdir()) == [
        "flink-python-9.9.9.jar",
        "flink-sql-client-9.9.9.jar",
    ]
    other = WheelFlink(_fake_home(tmp_path / "other"), "9.9.9")
    assert sql_client.opt_overlay(other, [], tmp_path / "cache") != opt


@pytest.fixture
def fake_flink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WheelFlink:
    """A fake distribution whose gateway jar comes from a ``file://`` repository."""
    flink = WheelFlink(_fake_home(tmp_path), "9.9.9")
    repo = _publish(tmp_path / "repo", sql_client.gateway_artifact("9.9.9"), BODY)
    monkeypatch.setenv("PYFLINK_GCP_MAVEN_REPOSITORY", repo)
    return flink


def test_a_script_runs_locally_with_the_jars_and_this_python(
    fake_flink: WheelFlink, tmp_path: Path
) -> None:
    base = {"PATH": os.environ["PATH"], "_python_worker_execution_mode": "loopback", "KEEP": "1"}
    launch = sql_client.prepare(
        ["-f", "script.sql"], base_env=base, flink=fake_flink, cache=tmp_path / "cache"
    )
    bridge, python = launch.jars["bridge"], launch.jars["flink-python"]
    assert launch.argv == [
        str(fake_flink.script),
        f"-Dpython.executable={sys.executable}",
        f"-Dpython.client.executable={sys.executable}",
        "-Dexecution.target=local",
        "-Dtable.dml-sync=true",
        "-j",
        str(bridge),
        "-j",
        str(python),
        "-f",
        "script.sql",
    ]
    assert bridge.name == "pyflink-gcp-bridge.jar" and bridge.is_file()
    assert python == fake_flink.opt / "flink-python-9.9.9.jar"
    opt = Path(launch.env["FLINK_OPT_DIR"])
    assert (opt / "flink-sql-gateway-9.9.9.jar").read_bytes() == BODY
    assert launch.env["FLINK_HOME"] == str(fake_flink.home)
    assert launch.env["FLINK_LIB_DIR"] == str(fake_flink.home / "lib")
    assert launch.env["KEEP"] == "1" and "_python_worker_execution_mode" not in launch.env
    described = launch.describe()
    assert "Flink 9.9.9 from the apache-flink wheel" in described
    assert f"flink-sql-gateway: {launch.jars['flink-sql-gateway']}" in described
    assert f"FLINK_OPT_DIR={opt}" in described


def test_the_users_settings_win_over_the_defaults(fake_flink: WheelFlink, tmp_path: Path) -> None:
    args = ["embedded", "-D", "python.executable=/venv/bin/python", "-Dexecution.target=remote"]
    launch = sql_client.prepare(
        args, base_env={"PATH": os.environ["PATH"]}, flink=fake_flink, cache=tmp_path / "cache"
    )
    assert launch.argv[:3] == [
        str(fake_flink.script),
        "embedded",
        f"-Dpython.client.executable={sys.executable}",
    ]
    assert launch.argv[-3:] == args[1:] and launch.argv[-4] == str(launch.jars["flink-python"])
    assert not any("execution.target=local" in arg for arg in launch.argv)
    # A configuration directory of the user's decides where jobs run, too.
    conf = sql_client.prepare(
        ["-f", "s.sql"],
        base_env={"PATH": os.environ["PATH"], "FLINK_CONF_DIR": "/etc/flink"},
        flink=fake_flink,
        cache=tmp_path / "cache",
    )
    assert not any("execution.target" in arg or "dml-sync" in arg for arg in conf.argv)
    assert conf.env["FLINK_CONF_DIR"] == "/etc/flink"
    # The wheel's own conf/ (exported by PyFlink's gateway, copied into os.environ by a local
    # job's workers) is no configuration of the user's: the jobs still run in the client.
    wheels = sql_client.prepare(
        ["-f", "s.sql"],
        base_env={"PATH": os.environ["PATH"], "FLINK_CONF_DIR": str(fake_flink.home / "conf")},
        flink=fake_flink,
        cache=tmp_path / "cache",
    )
    assert "-Dexecution.target=local" in wheels.argv
    assert "-Dtable.dml-sync=true" in wheels.argv


def _launch(tmp_path: Path, script: str) -> sql_client.SqlClientLaunch:
    """A launch whose "client" is a shell script standing in for sql-client.sh's exit."""
    client = tmp_path / "client.sh"
    client.write_text("#!/bin/sh\n" + script)
    client.chmod(client.stat().st_mode | stat.S_IXUSR)
    flink = WheelFlink(tmp_path, "9.9.9")
    return sql_client.SqlClientLaunch(flink, [str(client)], dict(os.environ), {})


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("echo 'Flink SQL> [INFO] Complete execution of the SQL update statement.'", 0),
        ("printf 'Flink SQL> \\033[31;1m[ERROR] Could not execute SQL statement.\\n'", 1),
        ("echo 'Flink SQL> [INFO] ok'; exit 3", 3),
    ],
)
def test_a_script_run_fails_when_a_statement_failed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], script: str, status: int
) -> None:
    assert sql_client.run_script(_launch(tmp_path, script)) == status
    assert "Flink SQL> " in capfd.readouterr().out


def test_the_command_prints_where_things_are(
    fake_flink: WheelFlink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYFLINK_GCP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sql_client, "wheel_flink", lambda: fake_flink)
    assert cli.main(["sql-client", "--print-classpath", "-f", "s.sql"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Flink 9.9.9 from the apache-flink wheel\n")
    assert str(tmp_path / "cache" / "maven" / "org" / "apache" / "flink") in out
    assert out.rstrip().endswith(" -f s.sql")


def test_the_command_reports_a_failed_download(
    fake_flink: WheelFlink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYFLINK_GCP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYFLINK_GCP_MAVEN_REPOSITORY", f"http://{refusing_endpoint()}/m2")
    monkeypatch.setattr(sql_client, "wheel_flink", lambda: fake_flink)
    assert cli.main(["sql-client", "-f", "s.sql"]) == 1
    assert capsys.readouterr().err.startswith("pyflink-gcp: cannot download org.apache.flink:")


def test_the_command_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "sql-client" in capsys.readouterr().out


LOG_OF_A_FAILED_JOB = """\
2026-01-01 00:00:00,000 INFO  org.apache.flink.runtime.jobmaster.JobMaster [] - starting
java.util.concurrent.ExecutionException: org.apache.flink.runtime.execution.SuppressRestartsException: Unrecoverable failure.
Caused by: java.lang.RuntimeException: Error received from SDK harness for instruction 2: Traceback (most recent call last):
pyflink_gcp.core.errors.DestinationNotFoundError: sink 'events': topic projects/p/topics/events-eu does not exist and the create disposition is CREATE_NEVER
Caused by: java.lang.RuntimeException: Failed to close remote bundle
"""


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (
            LOG_OF_A_FAILED_JOB,
            "pyflink_gcp.core.errors.DestinationNotFoundError: sink 'events': topic "
            "projects/p/topics/events-eu does not exist and the create disposition is "
            "CREATE_NEVER",
        ),
        (
            "x\nCaused by: java.io.IOException: outer\nCaused by: java.net.ConnectException: no\n",
            "java.net.ConnectException: no",
        ),
        ("2026-01-01 INFO all went well\n", None),
    ],
)
def test_the_root_cause_of_a_failed_job_is_found_in_the_log(log: str, cause: str | None) -> None:
    assert sql_client.job_failure(log) == cause


def test_a_failed_script_prints_the_jobs_root_cause_from_this_runs_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    log = logs / "flink-me-sql-client-host.log"
    # An earlier run's failure is in the log already: only what this run wrote counts.
    log.write_text("pyflink_gcp.core.errors.WriteError: an old failure\n")
    script = (
        f"printf 'pyflink_gcp.core.errors.DestinationNotFoundError: sink x: gone\\n' >> {log}\n"
        "printf 'Flink SQL> \\033[31;1m[ERROR] Could not execute SQL statement. Reason:\\n'\n"
        "echo 'java.lang.IllegalStateException: MiniCluster is not yet running'\n"
    )
    launch = _launch(tmp_path, script)
    launch.env["FLINK_LOG_DIR"] = str(logs)
    assert sql_client.run_script(launch) == 1
    err = capfd.readouterr().err
    assert "the job failed: pyflink_gcp.core.errors.DestinationNotFoundError: sink x: gone" in err
    assert "an old failure" not in err
    assert str(log) in err


def test_a_log_the_run_rewrote_is_read_whole(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    log = logs / "flink-me-sql-client-host.log"
    log.write_text("2026-01-01 00:00:00 INFO an earlier run, longer than this one's log\n" * 20)
    # As Flink's log4j-cli.properties does: the client starts the file afresh.
    script = (
        f"printf 'pyflink_gcp.core.errors.WriteError: sink x: refused\\n' > {log}\n"
        "printf 'Flink SQL> [ERROR] Could not execute SQL statement.\\n'\n"
    )
    launch = _launch(tmp_path, script)
    launch.env["FLINK_LOG_DIR"] = str(logs)
    assert sql_client.run_script(launch) == 1
    assert "the job failed: pyflink_gcp.core.errors.WriteError: sink x: refused" in (
        capfd.readouterr().err
    )
