"""Cached, idempotent installation of the emulator tools that do not ship with gcloud.

Two tools are built once per machine into a cache directory:

* a separate virtualenv with the BigQuery emulator (``bqemulator``) and the GCS
  emulator (``gcp-storage-emulator``). It must be separate: bqemulator needs
  protobuf 6, while PyFlink (through apache-beam) pins protobuf below 6.
* the Go Cloud Tasks emulator, built from the exact module version. ``go install
  ...@v1.2.0`` is refused here because the module proxy will not list the versions,
  while ``go mod download`` of the exact version works.

The Pub/Sub, Bigtable and Spanner emulators are components of the Google Cloud CLI;
they are only checked for, since installing CLI components needs the user's package
manager or ``gcloud components``.

Each step writes a stamp file once it succeeded, so a warm setup only checks stamps.
A lock file serialises concurrent setups (parallel test workers, two terminals).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyflink_gcp.tools.emulators.processes import EmulatorError

__all__ = [
    "ALL_SERVICES",
    "BQ_VENV_REQUIREMENTS",
    "CLOUD_TASKS_MODULE",
    "GCLOUD_COMPONENTS",
    "Tools",
    "cache_root",
    "gcloud_sdk_root",
    "setup_tools",
]

ALL_SERVICES: tuple[str, ...] = (
    "pubsub",
    "bigtable",
    "spanner",
    "bigquery",
    "cloudtasks",
    "gcs",
    "receiver",
)

# Pinned together: bqemulator 1.4.0 runs `INSTALL spatial` at boot, which only stays
# offline when the extension built for this exact DuckDB version is already installed.
DUCKDB_VERSION = "1.5.5"
BQ_VENV_REQUIREMENTS: tuple[str, ...] = (
    "bqemulator==1.4.0",
    f"duckdb=={DUCKDB_VERSION}",
    f"duckdb-extension-spatial=={DUCKDB_VERSION}",
    f"duckdb-extension-avro=={DUCKDB_VERSION}",
    "numpy",  # imported by bqemulator but not declared by it
    "gcp-storage-emulator",
)

# The tag, not HEAD: later commits panic at start without an oidc.key file.
CLOUD_TASKS_MODULE = "github.com/aertje/cloud-tasks-emulator"
CLOUD_TASKS_VERSION = "v1.2.0"

# gcloud component that provides each service's emulator, the path (relative to the SDK
# root) whose presence shows that it is installed, and the apt package that installs it
# when the CLI itself came from apt (which disables `gcloud components`).
GCLOUD_COMPONENTS: dict[str, tuple[str, str, str]] = {
    "pubsub": ("pubsub-emulator", "platform/pubsub-emulator", "google-cloud-cli-pubsub-emulator"),
    "bigtable": ("bigtable", "platform/bigtable-emulator", "google-cloud-cli-bigtable-emulator"),
    "spanner": (
        "cloud-spanner-emulator",
        "bin/cloud_spanner_emulator",
        "google-cloud-cli-spanner-emulator",
    ),
}

_BQ_SERVICES = frozenset({"bigquery", "gcs"})

# Runs inside the BigQuery venv: installs the DuckDB extensions from the wheels' files
# (no download) into $HOME/.duckdb, then proves that they load.
_INSTALL_EXTENSIONS = """
import glob, importlib, os, sys
import duckdb
con = duckdb.connect()
for module, ext in (("duckdb_extension_spatial", "spatial"), ("duckdb_extension_avro", "avro")):
    base = os.path.dirname(importlib.import_module(module).__file__)
    files = glob.glob(os.path.join(base, "extensions", "*", ext + ".duckdb_extension"))
    if not files:
        sys.exit(f"no {ext}.duckdb_extension file inside the {module} wheel")
    con.execute("INSTALL '" + files[0].replace("'", "''") + "'")
    con.execute("LOAD " + ext)
print(duckdb.__version__)
"""


def cache_root() -> Path:
    """Returns the tools cache: ``$PYFLINK_GCP_CACHE`` or ``~/.cache/pyflink-gcp``."""
    configured = os.environ.get("PYFLINK_GCP_CACHE")
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "pyflink-gcp"


@dataclass(frozen=True)
class Tools:
    """Where the installed emulator tools live.

    Attributes:
        cache: The cache root.
        bq_venv: The BigQuery/GCS emulator virtualenv.
        duckdb_home: The ``HOME`` under which the DuckDB extensions are installed; the
            BigQuery emulator must run with it so its ``INSTALL spatial`` finds them.
        cloud_tasks_binary: The Go Cloud Tasks emulator.
        gcloud: The ``gcloud`` executable, when a gcloud service was requested.
        actions: What this call did, one human-readable line per step.
    """

    cache: Path
    bq_venv: Path
    duckdb_home: Path
    cloud_tasks_binary: Path
    gcloud: str | None = None
    actions: list[str] = field(default_factory=list, compare=False)

    @property
    def bqemulator(self) -> Path:
        """The ``bqemulator`` console script."""
        return self.bq_venv / "bin" / "bqemulator"

    @property
    def gcs_emulator(self) -> Path:
        """The ``gcp-storage-emulator`` console script."""
        return self.bq_venv / "bin" / "gcp-storage-emulator"


def _tools_for(cache: Path) -> Tools:
    return Tools(
        cache=cache,
        bq_venv=cache / "bq-venv",
        duckdb_home=cache / "duckdb-home",
        cloud_tasks_binary=cache / "bin" / "cloud-tasks-emulator",
    )


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stamp_ok(stamp: Path, expected: str, *required: Path) -> bool:
    try:
        return stamp.read_text() == expected and all(p.exists() for p in required)
    except OSError:
        return False


def _run(
    argv: list[str], *, what: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd=str(cwd) if cwd is not None else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as err:
        raise EmulatorError(f"{what}: cannot run {argv[0]!r}: {err}") from err
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-30:]
        raise EmulatorError(
            f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n" + "\n".join(output)
        )
    return done.stdout


def _setup_bq_venv(tools: Tools) -> str:
    spec = json.dumps(
        {
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "requirements": BQ_VENV_REQUIREMENTS,
        }
    )
    stamp = tools.cache / "bq-venv.stamp"
    if _stamp_ok(stamp, spec, tools.bqemulator, tools.gcs_emulator):
        return f"BigQuery/GCS emulator venv: cached ({tools.bq_venv})"
    stamp.unlink(missing_ok=True)
    (tools.cache / "duckdb-extensions.stamp").unlink(missing_ok=True)
    # A venv is not relocatable (absolute paths in its scripts): rebuild in place.
    shutil.rmtree(tools.bq_venv, ignore_errors=True)
    _run(
        [sys.executable, "-m", "venv", str(tools.bq_venv)],
        what="creating the BigQuery emulator venv",
    )
    python = str(tools.bq_venv / "bin" / "python")
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--upgrade",
            "pip",
        ],
        what="upgrading pip in the BigQuery emulator venv",
    )
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            *BQ_VENV_REQUIREMENTS,
        ],
        what="installing bqemulator and gcp-storage-emulator",
    )
    stamp.write_text(spec)
    return (
        f"BigQuery/GCS emulator venv: installed {', '.join(BQ_VENV_REQUIREMENTS)} ({tools.bq_venv})"
    )


def _setup_duckdb_extensions(tools: Tools) -> str:
    stamp = tools.cache / "duckdb-extensions.stamp"
    if _stamp_ok(stamp, DUCKDB_VERSION, tools.duckdb_home / ".duckdb"):
        return f"DuckDB spatial/avro extensions: cached ({tools.duckdb_home})"
    tools.duckdb_home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(tools.duckdb_home)}
    _run(
        [str(tools.bq_venv / "bin" / "python"), "-c", _INSTALL_EXTENSIONS],
        what="installing the DuckDB spatial and avro extensions offline",
        env=env,
    )
    stamp.write_text(DUCKDB_VERSION)
    return f"DuckDB spatial/avro extensions: installed offline under {tools.duckdb_home}"


def _setup_cloud_tasks(tools: Tools) -> str:
    expected = f"{CLOUD_TASKS_MODULE}@{CLOUD_TASKS_VERSION}"
    stamp = tools.cache / "cloud-tasks-emulator.stamp"
    if _stamp_ok(stamp, expected, tools.cloud_tasks_binary):
        return f"Cloud Tasks emulator: cached ({tools.cloud_tasks_binary})"
    go = shutil.which("go")
    if go is None:
        raise EmulatorError(
            "The Cloud Tasks emulator is built from source with Go, and `go` is not on PATH. "
            "Install Go (https://go.dev/dl/) and run "
            "`pyflink-gcp emulators setup` again."
        )
    stamp.unlink(missing_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    with tempfile.TemporaryDirectory(prefix="cloud-tasks-dl-") as scratch:
        # Outside any module, so that go.mod of the current directory cannot interfere.
        out = _run(
            [go, "mod", "download", "-json", expected],
            what=f"downloading {expected}",
            env=env,
            cwd=Path(scratch),
        )
    info = json.loads(out)
    if info.get("Error") or not info.get("Dir"):
        raise EmulatorError(f"downloading {expected} failed: {info.get('Error', out)}")
    # The module cache is read-only and `go build -mod=mod` may update go.mod/go.sum.
    build_dir = tools.cache / "build" / f"cloud-tasks-emulator-{CLOUD_TASKS_VERSION}"
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.copytree(info["Dir"], build_dir)
    for root, dirs, files in os.walk(build_dir):
        for name in dirs + files:
            path = Path(root) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    build_dir.chmod(build_dir.stat().st_mode | stat.S_IWUSR)
    tools.cloud_tasks_binary.parent.mkdir(parents=True, exist_ok=True)
    _run(
        [go, "build", "-o", str(tools.cloud_tasks_binary), "."],
        what=f"building {expected}",
        env=env,
        cwd=build_dir,
    )
    stamp.write_text(expected)
    return f"Cloud Tasks emulator: built {expected} with {go} ({tools.cloud_tasks_binary})"


def gcloud_sdk_root(gcloud: str) -> Path:
    """Finds the Google Cloud SDK root from the ``gcloud`` executable.

    Following the symlink is enough for the usual layouts (``<root>/bin/gcloud``);
    ``gcloud info`` is the slower fallback for anything else.
    """
    candidate = Path(os.path.realpath(gcloud)).parent.parent
    if (candidate / "platform").is_dir() or (candidate / "lib" / "googlecloudsdk").is_dir():
        return candidate
    out = _run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        what="locating the Google Cloud SDK",
    )
    return Path(out.strip())


def _check_gcloud(services: Iterable[str]) -> tuple[str | None, list[str]]:
    wanted = [s for s in services if s in GCLOUD_COMPONENTS]
    if not wanted:
        return None, []
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        needed = " ".join(GCLOUD_COMPONENTS[s][0] for s in wanted)
        raise EmulatorError(
            f"The {', '.join(wanted)} emulators come with the Google Cloud CLI, and `gcloud` is "
            f"not on PATH. Install it (https://cloud.google.com/sdk/docs/install), then "
            f"`gcloud components install {needed}`."
        )
    root = gcloud_sdk_root(gcloud)
    missing = [s for s in wanted if not (root / GCLOUD_COMPONENTS[s][1]).exists()]
    if missing:
        components = [GCLOUD_COMPONENTS[s][0] for s in missing]
        raise EmulatorError(
            f"The gcloud component(s) {', '.join(components)} (for {', '.join(missing)}) are "
            f"not installed in {root}. Run `gcloud components install {' '.join(components)}` "
            "(or, for a Google Cloud CLI installed by apt, install "
            + " ".join(GCLOUD_COMPONENTS[s][2] for s in missing)
            + ")."
        )
    return gcloud, [f"gcloud emulators ({', '.join(wanted)}): found in {root}"]


def setup_tools(services: Iterable[str] = ALL_SERVICES) -> Tools:
    """Installs (once) and locates the tools needed to start ``services``.

    Idempotent and cached: a warm call only checks stamp files and the gcloud
    components, so the stack calls it at every start. A cold call takes about a minute
    (the BigQuery venv) plus the Go build.

    Args:
        services: Service names from :data:`ALL_SERVICES`.

    Returns:
        The tool locations, with ``actions`` describing what was done or found.

    Raises:
        ValueError: An unknown service name.
        EmulatorError: A step failed or a prerequisite (Go, gcloud or one of its
            components) is missing; the message names what to install.
    """
    wanted = list(dict.fromkeys(services))
    unknown = [s for s in wanted if s not in ALL_SERVICES]
    if unknown:
        raise ValueError(f"unknown service(s) {unknown}; choose from {list(ALL_SERVICES)}")
    cache = cache_root()
    tools = _tools_for(cache)
    actions: list[str] = []
    with _locked(cache):
        if _BQ_SERVICES.intersection(wanted):
            actions.append(_setup_bq_venv(tools))
            if "bigquery" in wanted:
                actions.append(_setup_duckdb_extensions(tools))
        if "cloudtasks" in wanted:
            actions.append(_setup_cloud_tasks(tools))
    gcloud, found = _check_gcloud(wanted)
    actions.extend(found)
    return Tools(
        cache=tools.cache,
        bq_venv=tools.bq_venv,
        duckdb_home=tools.duckdb_home,
        cloud_tasks_binary=tools.cloud_tasks_binary,
        gcloud=gcloud,
        actions=actions,
    )
