"""The configuration directory and the process environment of a standalone Flink cluster.

The apache-flink wheel's ``pyflink/`` directory is a complete Flink distribution (``bin/``,
``conf/``, ``lib/``, ``opt/``), but its ``conf/config.yaml`` is made for one cluster per machine:
``localhost``, the fixed ports 6123 and 8081, one slot. A cluster started by this package gets a
configuration directory of its own instead (``FLINK_CONF_DIR``), copied from the wheel's and
rewritten with loopback addresses, ports chosen free at start, its own checkpoint, log and
temporary directories, and the current interpreter as the Python of the client and the workers.
Everything here is pure file and mapping work, so it is tested without starting a JVM.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

from pyflink_gcp.tools.emulators.processes import LOOPBACK, free_port

__all__ = [
    "ClusterError",
    "ClusterLayout",
    "ClusterPorts",
    "ClusterSettings",
    "cluster_config",
    "flatten",
    "flink_home",
    "process_env",
    "write_conf_dir",
]

#: Inherited variables that would point the wheel's scripts at another Flink installation or
#: configuration (``config.sh`` trusts them over its own location), or a client at another
#: Python gateway or worker mode.
_SCRUBBED_PREFIXES = ("FLINK_",)
_SCRUBBED_NAMES = frozenset(
    {"_FLINK_HOME_DETERMINED", "PYFLINK_GATEWAY_PORT", "_python_worker_execution_mode"}
)


class ClusterError(RuntimeError):
    """A standalone cluster could not be configured, started, used or stopped."""


def flink_home() -> Path:
    """The installed apache-flink wheel's ``pyflink/`` directory, a complete FLINK_HOME.

    Found without importing PyFlink (which would start nothing, but costs time) from the
    package's import spec.

    Raises:
        ClusterError: apache-flink is not installed, or its directory lacks the cluster
            scripts.
    """
    spec = find_spec("pyflink")
    if spec is None or spec.origin is None:
        raise ClusterError("apache-flink is not installed: no 'pyflink' package to start from")
    home = Path(spec.origin).resolve().parent
    missing = [
        name
        for name in ("bin/jobmanager.sh", "bin/taskmanager.sh", "bin/flink", "conf/config.yaml")
        if not (home / name).is_file()
    ]
    if missing:
        raise ClusterError(f"the apache-flink installation at {home} lacks {', '.join(missing)}")
    return home


@dataclass(frozen=True)
class ClusterSettings:
    """What a cluster is made of, and the knobs a test turns.

    The memory sizes are the whole processes' (``*.memory.process.size``): Flink derives heap,
    managed and network memory from them. 1024m for the JobManager and 1280m per TaskManager
    run the examples at parallelism 4 on two TaskManagers of two slots; the wheel's defaults
    (1600m and 1728m) would take a quarter more memory on a machine shared with other jobs.

    Attributes:
        taskmanagers: TaskManagers started with the cluster.
        slots: Task slots per TaskManager.
        jobmanager_memory: ``jobmanager.memory.process.size``.
        taskmanager_memory: ``taskmanager.memory.process.size``.
        heartbeat_interval: ``heartbeat.interval`` (the default is 10 s). A killed
            TaskManager's process refuses the next heartbeat at once, and after
            ``heartbeat_rpc_failure_threshold`` refused ones in a row the JobManager declares it
            lost: within about two intervals, instead of the timeout.
        heartbeat_timeout: ``heartbeat.timeout`` (the default is 50 s): how long a TaskManager
            that is alive but silent (a long GC pause, a frozen host) may stay so.
        heartbeat_rpc_failure_threshold: ``heartbeat.rpc-failure-threshold``.
        restart_attempts: ``restart-strategy.exponential-delay.attempts-before-reset-backoff``:
            restarts in a row, without a quiet ``restart_reset_after`` between them, before the
            job fails for good.
        restart_delay: The first restart's delay (``...initial-backoff``). A task exception or
            a killed Python worker restarts after it; it doubles with every failure that comes
            before ``restart_reset_after`` of quiet, up to ``restart_max_delay``.
        restart_max_delay: ``...max-backoff``: a job that keeps failing is restarted at most
            this often.
        restart_reset_after: ``...reset-backoff-threshold``.
        startup_period: ``resourcemanager.standalone.start-up-time``. While it lasts, a slot
            request no registered TaskManager can serve waits for one to register (up to
            ``slot.request.timeout``); after it, such a request fails at once. Flink's default
            is ``slot.request.timeout`` (5 min) counted from the cluster's start, so on a
            cluster older than that a job whose TaskManager died does not wait for the
            replacement: its restarts fail ("no resource available") and climb the restart
            backoff until one registers. ``0 ms`` makes the period last for the cluster's life:
            Flink's standalone resource manager schedules the period's end only for a positive
            duration, and cannot schedule one beyond about 248 days.
        python: The interpreter of the job client and of every Python worker.
        extra: More configuration entries (flat keys), applied last.
    """

    taskmanagers: int = 2
    slots: int = 2
    jobmanager_memory: str = "1024m"
    taskmanager_memory: str = "1280m"
    heartbeat_interval: str = "1 s"
    heartbeat_timeout: str = "15 s"
    heartbeat_rpc_failure_threshold: int = 2
    restart_attempts: int = 20
    restart_delay: str = "100 ms"
    restart_max_delay: str = "10 s"
    restart_reset_after: str = "5 s"
    startup_period: str = "0 ms"
    python: str = field(default_factory=lambda: sys.executable)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.taskmanagers < 0:
            raise ValueError(f"taskmanagers must be >= 0, got {self.taskmanagers}")
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")


@dataclass(frozen=True)
class ClusterPorts:
    """The JobManager's fixed ports; every TaskManager port is left to the kernel (0).

    The JobManager's must be known before it starts (the TaskManagers and the client find it
    through the configuration), so they are chosen free just before; a TaskManager registers
    with whatever ports it bound, so port 0 there has no race at all.
    """

    rpc: int
    rest: int
    blob: int

    @classmethod
    def choose(cls) -> ClusterPorts:
        """Three distinct ports that are free on the loopback address now."""
        chosen: list[int] = []
        while len(chosen) < 3:
            port = free_port(LOOPBACK)
            if port not in chosen:
                chosen.append(port)
        return cls(rpc=chosen[0], rest=chosen[1], blob=chosen[2])


@dataclass(frozen=True)
class ClusterLayout:
    """The directories of one cluster, all under ``root`` so one removal cleans up.

    Attributes:
        root: The cluster's own directory.
    """

    root: Path

    @property
    def conf(self) -> Path:
        """``FLINK_CONF_DIR``."""
        return self.root / "conf"

    @property
    def log(self) -> Path:
        """``FLINK_LOG_DIR``: the Flink logs and each process's console output."""
        return self.root / "log"

    @property
    def pid(self) -> Path:
        """``FLINK_PID_DIR``: the scripts' pid files (by default in the shared ``/tmp``)."""
        return self.root / "pid"

    @property
    def checkpoints(self) -> Path:
        """``execution.checkpointing.dir``."""
        return self.root / "checkpoints"

    @property
    def savepoints(self) -> Path:
        """``execution.checkpointing.savepoint-dir``."""
        return self.root / "savepoints"

    @property
    def tmp(self) -> Path:
        """``io.tmp.dirs``: blob caches and the Python workers' files, one directory per
        process below it (:meth:`tmp_of`)."""
        return self.root / "tmp"

    def tmp_of(self, process: str) -> Path:
        """The ``io.tmp.dirs`` of one process, so its blob cache tells what reached it."""
        return self.tmp / process

    def create(self) -> None:
        """Creates every directory but ``conf`` (which :func:`write_conf_dir` copies)."""
        for directory in (self.log, self.pid, self.checkpoints, self.savepoints, self.tmp):
            directory.mkdir(parents=True, exist_ok=True)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings as Flink reads them: one dotted key per leaf.

    ``config.yaml`` may spell a key nested or flat; Flink flattens the nesting the same way, so
    the wheel's nested defaults and this package's flat overrides merge as one flat mapping
    without a key being set twice in two spellings.
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def cluster_config(
    settings: ClusterSettings, ports: ClusterPorts, layout: ClusterLayout
) -> dict[str, Any]:
    """The entries this package sets on top of the wheel's ``config.yaml``.

    Every address is the loopback one (``localhost`` may resolve to ``::1`` first and bind
    elsewhere than the clients connect), and the REST caches are short: a test that polls the
    checkpoint counts or the job state must see them change within a second, not after the
    default three seconds.
    """
    config: dict[str, Any] = {
        "jobmanager.rpc.address": LOOPBACK,
        "jobmanager.rpc.port": ports.rpc,
        "jobmanager.bind-host": LOOPBACK,
        "jobmanager.memory.process.size": settings.jobmanager_memory,
        "taskmanager.host": LOOPBACK,
        "taskmanager.bind-host": LOOPBACK,
        "taskmanager.rpc.port": "0",
        "taskmanager.data.port": 0,
        "taskmanager.numberOfTaskSlots": settings.slots,
        "taskmanager.memory.process.size": settings.taskmanager_memory,
        "rest.address": LOOPBACK,
        "rest.bind-address": LOOPBACK,
        "rest.port": ports.rest,
        "blob.server.port": str(ports.blob),
        "rest.cache.checkpoint-statistics.timeout": "500 ms",
        "rest.cache.execution-graph.timeout": "500 ms",
        "parallelism.default": 1,
        "execution.checkpointing.dir": layout.checkpoints.as_uri(),
        "execution.checkpointing.savepoint-dir": layout.savepoints.as_uri(),
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": settings.restart_delay,
        "restart-strategy.exponential-delay.max-backoff": settings.restart_max_delay,
        "restart-strategy.exponential-delay.backoff-multiplier": 2.0,
        "restart-strategy.exponential-delay.jitter-factor": 0.1,
        "restart-strategy.exponential-delay.reset-backoff-threshold": settings.restart_reset_after,
        "restart-strategy.exponential-delay.attempts-before-reset-backoff": (
            settings.restart_attempts
        ),
        "jobmanager.execution.failover-strategy": "region",
        "resourcemanager.standalone.start-up-time": settings.startup_period,
        "heartbeat.interval": settings.heartbeat_interval,
        "heartbeat.timeout": settings.heartbeat_timeout,
        "heartbeat.rpc-failure-threshold": settings.heartbeat_rpc_failure_threshold,
        "io.tmp.dirs": str(layout.tmp),
        "python.executable": settings.python,
        "python.client.executable": settings.python,
    }
    config.update(settings.extra)
    return config


def write_conf_dir(home: Path, layout: ClusterLayout, overrides: Mapping[str, Any]) -> Path:
    """Copies the wheel's ``conf/`` to ``layout.conf`` and rewrites its ``config.yaml``.

    The log4j and logback files come along unchanged (the scripts point the JVMs at them in
    ``FLINK_CONF_DIR``). ``config.yaml`` is written with flat keys only: the wheel's entries
    flattened, then ``overrides``. ``masters`` and ``workers``, read only by
    ``start-cluster.sh``, are rewritten to match, so they cannot mislead.

    Returns:
        The path of the written ``config.yaml``.

    Raises:
        ClusterError: The wheel's ``config.yaml`` is not a YAML mapping.
    """
    shutil.copytree(home / "conf", layout.conf, dirs_exist_ok=True)
    path = layout.conf / "config.yaml"
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, Mapping):
        raise ClusterError(f"{home / 'conf' / 'config.yaml'} is not a YAML mapping")
    merged = flatten(loaded)
    merged.update(overrides)
    header = "# Written by pyflink-gcp from the apache-flink wheel's config.yaml.\n"
    path.write_text(
        header + yaml.safe_dump(merged, default_flow_style=False, sort_keys=True, width=2**31)
    )
    rest = f"{merged.get('rest.address', LOOPBACK)}:{merged.get('rest.port', 8081)}"
    (layout.conf / "masters").write_text(rest + "\n")
    (layout.conf / "workers").write_text(f"{merged.get('taskmanager.host', LOOPBACK)}\n")
    return path


def process_env(
    base: Mapping[str, str],
    extra: Mapping[str, str],
    layout: ClusterLayout,
    ident: str,
) -> dict[str, str]:
    """The environment of one cluster process (a JobManager, a TaskManager or a client).

    ``base`` (normally ``os.environ``) loses every ``FLINK_*`` variable and the scripts'
    ``_FLINK_HOME_DETERMINED`` marker, which would override what the scripts find from their
    own location; then ``extra`` is added (the emulator hosts a TaskManager's Python workers
    must see: on a standalone cluster they inherit the TaskManager's environment, and
    ``containerized.taskmanager.env.*`` is not applied), then the cluster's own directories.
    ``ident`` names the process's log and pid files (``FLINK_IDENT_STRING``), so that two
    TaskManagers never share a pid file.
    """
    env = {
        name: value
        for name, value in base.items()
        if not name.startswith(_SCRUBBED_PREFIXES) and name not in _SCRUBBED_NAMES
    }
    env.update(extra)
    env.update(
        {
            "FLINK_CONF_DIR": str(layout.conf),
            "FLINK_LOG_DIR": str(layout.log),
            "FLINK_PID_DIR": str(layout.pid),
            "FLINK_IDENT_STRING": ident,
        }
    )
    return env
