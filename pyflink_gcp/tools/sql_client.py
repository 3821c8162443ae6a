"""``pyflink-gcp sql-client``: Flink's SQL client from the apache-flink wheel, with the connectors.

The wheel's ``pyflink/`` directory is a Flink distribution with ``bin/sql-client.sh`` and
``opt/flink-sql-client-*.jar``, but without the SQL gateway jar the client is built on, so the
script ends at once with ``NoClassDefFoundError: .../DefaultContext``. This command:

* finds the wheel's FLINK_HOME and its Flink version (from ``lib/flink-dist-<version>.jar``);
* downloads ``org.apache.flink:flink-sql-gateway`` of exactly that version from Maven Central
  into the tools cache (``$PYFLINK_GCP_CACHE`` or ``~/.cache/pyflink-gcp``) once, checked
  against the repository's ``.sha1`` file and the announced size, with a bounded timeout;
* builds a private ``opt/`` directory (symbolic links to the wheel's ``opt/`` jars plus the
  downloaded one) and points ``FLINK_OPT_DIR`` at it: ``sql-client.sh`` puts the SQL client,
  ``flink-python`` and ``flink-sql-gateway`` jars it finds there on the client's classpath;
* adds the bridge jar (the connectors' table factories) and ``flink-python`` as session jars
  (``-j``), so they also travel with every job to a remote cluster;
* sets ``python.executable`` to the current interpreter (the Python workers need
  apache-flink and pyflink-gcp), and, without a configuration of the user's, runs the jobs in a
  MiniCluster inside the client (``execution.target = local``; a script waits for each
  ``INSERT``: ``table.dml-sync = true``);
* hands every other argument to ``sql-client.sh`` unchanged, replacing this process with it
  for an interactive session; a script (``-f``) runs as a child whose exit status is 1 when a
  statement failed (Flink's client exits with 0 then), printing the failed job's root cause
  from the client's log, since the client itself may only say that its MiniCluster stopped.

A full Flink distribution needs none of this: its ``opt/`` holds the gateway jar (see
``docs/sql.md``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from pyflink_gcp.core.bridge import require_jar
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.tools.bridge_build import java_path
from pyflink_gcp.tools.emulators.tools import cache_root

__all__ = [
    "MAVEN_CENTRAL",
    "Artifact",
    "SqlClientError",
    "SqlClientLaunch",
    "WheelFlink",
    "fetch",
    "job_failure",
    "prepare",
    "run",
    "wheel_flink",
]

#: The repository the jars come from; ``$PYFLINK_GCP_MAVEN_REPOSITORY`` names a mirror.
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: How long one download may take in all (connecting, the checksum and the jar).
DOWNLOAD_TIMEOUT_S = 120.0
#: This command's own flags; everything else goes to ``sql-client.sh``.
PRINT_FLAG = "--print-classpath"
#: How the SQL client marks a statement that failed (after its colour escape).
ERROR_MARK = b"[ERROR]"
#: Variables a Python client or the test harness leaves behind that would change the workers.
_SCRUBBED_NAMES = ("_python_worker_execution_mode", "_FLINK_HOME_DETERMINED")
_DIST_JAR = re.compile(r"flink-dist-(?P<version>\d+\.\d+\.\d+(?:[-.][0-9A-Za-z.]+)?)\.jar")
_SHA1 = re.compile(r"[0-9a-fA-F]{40}")


class SqlClientError(RuntimeError):
    """The SQL client could not be prepared: no wheel, no Java, a failed or bad download."""


@dataclass(frozen=True)
class WheelFlink:
    """The Flink distribution inside the installed apache-flink wheel.

    Attributes:
        home: The ``pyflink/`` package directory (FLINK_HOME).
        version: The Flink version of its ``lib/flink-dist-*.jar``.
    """

    home: Path
    version: str

    @property
    def script(self) -> Path:
        """``bin/sql-client.sh``."""
        return self.home / "bin" / "sql-client.sh"

    @property
    def opt(self) -> Path:
        """The wheel's own ``opt/``."""
        return self.home / "opt"

    def opt_jar(self, prefix: str) -> Path:
        """The wheel's ``opt/<prefix>-<version>.jar``.

        Raises:
            SqlClientError: The wheel has none.
        """
        jar = self.opt / f"{prefix}-{self.version}.jar"
        if not jar.is_file():
            raise SqlClientError(f"the apache-flink installation at {self.home} lacks {jar.name}")
        return jar


def wheel_flink(home: Path | None = None) -> WheelFlink:
    """The installed apache-flink wheel's FLINK_HOME and Flink version.

    Found without importing PyFlink, from the package's import spec.

    Raises:
        SqlClientError: apache-flink is not installed, or its directory is no distribution
            with a SQL client.
    """
    if home is None:
        spec = find_spec("pyflink")
        if spec is None or spec.origin is None:
            raise SqlClientError("apache-flink is not installed: no 'pyflink' package found")
        home = Path(spec.origin).resolve().parent
    versions = sorted(
        match["version"]
        for jar in (home / "lib").glob("flink-dist-*.jar")
        if (match := _DIST_JAR.fullmatch(jar.name))
    )
    if len(versions) != 1:
        found = ", ".join(versions) or "none"
        raise SqlClientError(
            f"the apache-flink installation at {home} needs exactly one lib/flink-dist-*.jar "
            f"(found: {found})"
        )
    flink = WheelFlink(home=home, version=versions[0])
    if not flink.script.is_file():
        raise SqlClientError(f"the apache-flink installation at {home} lacks bin/sql-client.sh")
    return flink


@dataclass(frozen=True)
class Artifact:
    """One jar of a Maven repository.

    Attributes:
        group: The group id (``org.apache.flink``).
        name: The artifact id (``flink-sql-gateway``).
        version: The version.
    """

    group: str
    name: str
    version: str

    @property
    def file_name(self) -> str:
        """``<name>-<version>.jar``."""
        return f"{self.name}-{self.version}.jar"

    @property
    def path(self) -> str:
        """The jar's path in a Maven repository (and in the cache)."""
        return "/".join([*self.group.split("."), self.name, self.version, self.file_name])

    def __str__(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"


def gateway_artifact(version: str) -> Artifact:
    """The SQL gateway jar the wheel's SQL client needs, of exactly the wheel's version."""
    return Artifact("org.apache.flink", "flink-sql-gateway", version)


def repository() -> str:
    """``$PYFLINK_GCP_MAVEN_REPOSITORY`` or Maven Central, without a trailing slash."""
    return (os.environ.get("PYFLINK_GCP_MAVEN_REPOSITORY") or MAVEN_CENTRAL).rstrip("/")


def _sha1_of(path: Path) -> str:
    digest = hashlib.sha1(usedforsecurity=False)  # Maven's checksum
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cached(jar: Path) -> bool:
    """Whether ``jar`` is in the cache, whole: it matches the checksum stored beside it."""
    stored = jar.with_name(jar.name + ".sha1")
    if not (jar.is_file() and stored.is_file()):
        return False
    return stored.read_text().strip().lower() == _sha1_of(jar)


def _read(url: str, deadline: float) -> bytes:
    """The body of ``url``, read before ``deadline`` and as long as announced.

    Raises:
        TimeoutError: The deadline passed.
        SqlClientError: The body is shorter or longer than announced.
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("timed out")
    chunks: list[bytes] = []
    with urllib.request.urlopen(url, timeout=remaining) as response:
        announced = response.headers.get("Content-Length")
        while block := response.read(1 << 16):
            if time.monotonic() > deadline:
                raise TimeoutError("timed out")
            chunks.append(block)
    body = b"".join(chunks)
    if announced is not None and int(announced) != len(body):
        raise SqlClientError(f"{url}: got {len(body)} bytes of the {announced} announced")
    return body


def fetch(
    artifact: Artifact,
    cache: Path | None = None,
    *,
    repo: str | None = None,
    timeout_s: float = DOWNLOAD_TIMEOUT_S,
) -> Path:
    """The artifact's jar in the cache, downloaded first if it is not there whole.

    The jar is checked against the repository's ``<jar>.sha1`` (and the announced length) and
    only then moved into place, with its checksum beside it; later calls check the file against
    that checksum and download nothing.

    Args:
        artifact: The jar to fetch.
        cache: The cache root (default: :func:`~pyflink_gcp.tools.emulators.tools.cache_root`);
            the jar lands in ``<cache>/maven/<the repository's path>``.
        repo: The repository's base URL (default: :func:`repository`).
        timeout_s: How long the download may take in all.

    Raises:
        SqlClientError: The repository cannot be reached (offline), answers with an error, or
            sends a jar that does not match its checksum.
    """
    jar = (cache or cache_root()) / "maven" / artifact.path
    if _cached(jar):
        return jar
    base = repo or repository()
    url = f"{base}/{artifact.path}"
    jar.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    handle, partial = tempfile.mkstemp(prefix=f".{jar.name}.", dir=jar.parent)
    os.close(handle)
    try:
        try:
            text = _read(url + ".sha1", deadline).decode("ascii", "replace")
            expected = _SHA1.search(text)
            if expected is None:
                raise SqlClientError(f"{url}.sha1 holds no SHA-1 checksum: {text[:80]!r}")
            Path(partial).write_bytes(_read(url, deadline))
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise SqlClientError(
                f"cannot download {artifact} from {url} ({reason}); the SQL client needs it. "
                f"Without network, put the jar at {jar} and its SHA-1 in {jar.name}.sha1 beside "
                "it, or set PYFLINK_GCP_MAVEN_REPOSITORY to a reachable mirror"
            ) from err
        got = _sha1_of(Path(partial))
        if got != expected.group(0).lower():
            raise SqlClientError(
                f"the {artifact} jar from {url} does not match its checksum "
                f"(SHA-1 {got}, expected {expected.group(0).lower()})"
            )
        os.replace(partial, jar)
        jar.with_name(jar.name + ".sha1").write_text(got + "\n")
    finally:
        Path(partial).unlink(missing_ok=True)
    return jar


def _link(target: Path, link: Path) -> None:
    """Points ``link`` at ``target``, atomically (two clients may prepare at once)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)


def opt_overlay(flink: WheelFlink, extra: Sequence[Path], cache: Path | None = None) -> Path:
    """A private ``opt/`` directory: the wheel's ``opt/`` jars plus ``extra``, as symbolic links.

    One directory per wheel installation (its version and a digest of its path), so two
    environments with different wheels never share one. Links that no longer belong are
    removed.
    """
    digest = hashlib.sha256(str(flink.home).encode()).hexdigest()[:12]
    opt = (cache or cache_root()) / "sql-client" / f"flink-{flink.version}-{digest}" / "opt"
    opt.mkdir(parents=True, exist_ok=True)
    wanted = {jar.name: jar for jar in sorted(flink.opt.glob("*.jar"))}
    wanted.update({jar.name: jar for jar in extra})
    for entry in opt.iterdir():
        if entry.name not in wanted and entry.is_symlink():
            entry.unlink(missing_ok=True)
    for name, target in wanted.items():
        _link(target.resolve(), opt / name)
    return opt


def _dynamic_keys(args: Sequence[str]) -> set[str]:
    """The keys the user sets with ``-D key=value`` or ``-Dkey=value``."""
    keys: set[str] = set()
    for index, arg in enumerate(args):
        if arg == "-D" and index + 1 < len(args):
            keys.add(args[index + 1].split("=", 1)[0].strip())
        elif arg.startswith("-D") and len(arg) > 2:
            keys.add(arg[2:].split("=", 1)[0].strip())
    return keys


def _python_path(base: Mapping[str, str]) -> str | None:
    """``PYTHONPATH`` for the workers: the inherited one, plus the directory this package was
    imported from when that is no site directory (a source checkout: an editable install or
    ``python -m``), which a worker started from another directory would not find otherwise."""
    package_root = str(Path(__file__).resolve().parents[2])
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    inherited = base.get("PYTHONPATH")
    if package_root in sites or package_root in (inherited or "").split(os.pathsep):
        return inherited
    return os.pathsep.join(p for p in (package_root, inherited) if p)


@dataclass(frozen=True)
class SqlClientLaunch:
    """What :func:`run` starts.

    Attributes:
        flink: The wheel's distribution.
        argv: ``sql-client.sh`` and its arguments.
        env: The environment it runs in.
        jars: The jars this command adds: on the classpath through ``opt/``
            (``flink-sql-gateway``) and as session jars (the bridge, ``flink-python``).
    """

    flink: WheelFlink
    argv: list[str]
    env: dict[str, str]
    jars: dict[str, Path]

    def describe(self) -> str:
        """Where things are: the lines ``--print-classpath`` prints."""
        lines = [
            f"Flink {self.flink.version} from the apache-flink wheel",
            *(f"{name}: {path}" for name, path in self.jars.items()),
        ]
        shown = ("FLINK_HOME", "FLINK_OPT_DIR", "FLINK_CONF_DIR", "FLINK_LOG_DIR", "PYTHONPATH")
        lines += [f"{name}={self.env[name]}" for name in shown if name in self.env]
        lines.append("command: " + " ".join(_quoted(arg) for arg in self.argv))
        return "\n".join(lines)


def _quoted(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


def prepare(
    args: Sequence[str],
    *,
    base_env: Mapping[str, str] | None = None,
    flink: WheelFlink | None = None,
    cache: Path | None = None,
) -> SqlClientLaunch:
    """Fetches what is missing and assembles the ``sql-client.sh`` command line.

    Args:
        args: The arguments for ``sql-client.sh`` (``-f script.sql``, ``-D k=v``, ``-j``, ...).
        base_env: The environment to start from (default: ``os.environ``).
        flink: The distribution (default: the installed wheel's).
        cache: The cache root (default: the tools cache).

    Raises:
        SqlClientError: No wheel, no Java, no bridge jar, or the download failed.
    """
    base = dict(os.environ if base_env is None else base_env)
    flink = flink or wheel_flink()
    if shutil.which("java", path=java_path()) is None:
        raise SqlClientError(
            "no `java` found (on PATH or in $JAVA_HOME/bin): the SQL client is Java"
        )
    try:
        bridge = require_jar()
    except ConfigurationError as err:
        raise SqlClientError(str(err)) from err
    gateway = fetch(gateway_artifact(flink.version), cache)
    python_jar = flink.opt_jar("flink-python")
    opt = opt_overlay(flink, [gateway], cache)

    env = {name: value for name, value in base.items() if name not in _SCRUBBED_NAMES}
    env.update({"FLINK_HOME": str(flink.home), "FLINK_LIB_DIR": str(flink.home / "lib")})
    env["FLINK_OPT_DIR"] = str(opt)
    python_path = _python_path(base)
    if python_path:
        env["PYTHONPATH"] = python_path

    keys = _dynamic_keys(args)
    dynamic: list[str] = []
    for key in ("python.executable", "python.client.executable"):
        if key not in keys:
            dynamic.append(f"-D{key}={sys.executable}")
    # Without a configuration of the user's, the wheel's config.yaml sends jobs to a cluster on
    # localhost:8081 that nobody started: run them in the client instead.
    if "execution.target" not in keys and not _users_conf_dir(base, flink):
        dynamic.append("-Dexecution.target=local")
        if _is_script(args) and "table.dml-sync" not in keys:
            dynamic.append("-Dtable.dml-sync=true")
    # An explicit mode ("embedded") must stay the first argument.
    mode = list(args[:1]) if args[:1] == ["embedded"] else []
    argv = [
        str(flink.script),
        *mode,
        *dynamic,
        "-j",
        str(bridge),
        "-j",
        str(python_jar),
        *args[len(mode) :],
    ]
    jars = {"flink-sql-gateway": gateway, "bridge": bridge, "flink-python": python_jar}
    return SqlClientLaunch(flink=flink, argv=argv, env=env, jars=jars)


def _users_conf_dir(base: Mapping[str, str], flink: WheelFlink) -> bool:
    """Whether ``FLINK_CONF_DIR`` names a configuration of the user's: set, and not the wheel's
    own ``conf/`` (which PyFlink's gateway exports, and a PyFlink job's local Python workers
    copy into the environment of the process that started it)."""
    conf = base.get("FLINK_CONF_DIR")
    if not conf:
        return False
    try:
        return Path(conf).resolve() != (flink.home / "conf").resolve()
    except OSError:
        return True


def _is_script(args: Sequence[str]) -> bool:
    return any(arg in ("-f", "--file") or arg.startswith("--file=") for arg in args)


def client_logs(launch: SqlClientLaunch) -> list[Path]:
    """The SQL client's log files: ``flink-*-sql-client-*.log`` in its log directory
    (``FLINK_LOG_DIR``, else the distribution's ``log/``)."""
    directory = Path(launch.env.get("FLINK_LOG_DIR") or launch.flink.home / "log")
    return sorted(directory.glob("flink-*-sql-client-*.log"))


#: A Python exception line of this package (``pyflink_gcp.core.errors.X: message``) and, as a
#: fallback, the deepest ``Caused by:`` line of a Java stack trace.
_OWN_ERROR = re.compile(r"^(pyflink_gcp(?:\.\w+)+(?:Error|Exception): .+)$", re.MULTILINE)
_CAUSED_BY = re.compile(r"^Caused by: (.+)$", re.MULTILINE)


def job_failure(log_text: str) -> str | None:
    """The root cause of a failed job in the client's log, or None.

    With ``execution.target = local`` the job runs in a MiniCluster that shuts down as soon as
    the job fails, and the client, waiting for the ``INSERT`` (``table.dml-sync``), then only
    says ``MiniCluster is not yet running or has already been shut down``; the reason is in
    the log. An error of this package (it names the sink, the destination and the record) is
    preferred over the last ``Caused by:`` of a Java stack trace.
    """
    own = _OWN_ERROR.findall(log_text)
    if own:
        return str(own[0]).strip()
    causes = _CAUSED_BY.findall(log_text)
    return str(causes[-1]).strip() if causes else None


#: How much of a log's start tells whether a run rewrote it rather than appended to it.
_LOG_HEAD_BYTES = 256


def _log_marks(launch: SqlClientLaunch) -> dict[Path, tuple[int, bytes]]:
    """Each client log's size and first bytes before a run."""
    marks = {}
    for path in client_logs(launch):
        try:
            with path.open("rb") as log:
                marks[path] = (path.stat().st_size, log.read(_LOG_HEAD_BYTES))
        except OSError:
            continue
    return marks


def _this_runs_log(path: Path, mark: tuple[int, bytes] | None) -> str:
    """What a run wrote to ``path``: all of it when the run rewrote the file (Flink's
    ``log4j-cli.properties`` does not append), else what follows the size before the run."""
    with path.open("rb") as log:
        head = log.read(_LOG_HEAD_BYTES)
        size = path.stat().st_size
        start = 0
        if mark is not None and size >= mark[0] and head[: len(mark[1])] == mark[1]:
            start = mark[0]
        log.seek(start)
        return log.read().decode("utf-8", "replace")


def _report_job_failure(launch: SqlClientLaunch, marks: Mapping[Path, tuple[int, bytes]]) -> None:
    """Prints the root cause of a failed statement from what this run wrote to the log."""
    for path in client_logs(launch):
        try:
            text = _this_runs_log(path, marks.get(path))
        except OSError:
            continue
        cause = job_failure(text)
        if cause:
            print(f"pyflink-gcp: the job failed: {cause}", file=sys.stderr)
            print(f"pyflink-gcp: the SQL client's log: {path}", file=sys.stderr)
            return


def run_script(launch: SqlClientLaunch) -> int:
    """Runs a ``-f`` script's client, echoing its output; non-zero when a statement failed.

    Flink's SQL client stops at the first statement that fails but still exits with 0; a
    script run by a scheduler or a test needs the failure in the exit status, so a line with
    the client's ``[ERROR]`` mark turns it into 1, and the job's root cause, which the client
    may not show (:func:`job_failure`), is printed from its log.
    """
    failed = False
    marks = _log_marks(launch)
    process = subprocess.Popen(launch.argv, env=launch.env, stdout=subprocess.PIPE)
    assert process.stdout is not None
    out = sys.stdout.buffer
    try:
        for line in process.stdout:
            failed = failed or ERROR_MARK in line
            out.write(line)
            out.flush()
        returncode = process.wait()
    except KeyboardInterrupt:
        # The terminal sent the client the same interrupt: let it shut its session down.
        returncode = process.wait()
        return returncode or 130
    if failed:
        _report_job_failure(launch, marks)
    return returncode or (1 if failed else 0)


def run(args: Sequence[str]) -> int:
    """``pyflink-gcp sql-client [--print-classpath] [sql-client.sh arguments...]``.

    With ``--print-classpath`` prints where things are and returns. A script (``-f``) runs in a
    child process whose exit status says whether a statement failed (:func:`run_script`);
    anything else (an interactive session) replaces this process with the SQL client, so it
    owns the terminal and Ctrl-C reaches the client alone.
    """
    own = [arg for arg in args if arg == PRINT_FLAG]
    rest = [arg for arg in args if arg != PRINT_FLAG]
    try:
        launch = prepare(rest)
    except SqlClientError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1
    if own:
        print(launch.describe())
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    if _is_script(rest):
        return run_script(launch)
    os.execve(launch.argv[0], launch.argv, launch.env)
    raise AssertionError("execve returned")  # pragma: no cover
