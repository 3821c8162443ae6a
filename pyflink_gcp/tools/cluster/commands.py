"""``pyflink-gcp cluster up`` and ``pyflink-gcp cluster down``.

``up`` runs a :class:`StandaloneCluster` in the foreground, like ``pyflink-gcp emulators up``:
it prints how to submit to it and stops every process at Ctrl-C (or SIGTERM, SIGHUP). While it
runs it keeps a state file (``<cache>/cluster/<pid>.json``: its pid, REST URL and configuration
directory), through which ``down``, from another shell, finds it and asks it to stop.

With ``--env-from-emulators`` the cluster takes the variables of a running
``pyflink-gcp emulators up`` (which leaves them in its control directory), so its TaskManagers'
Python workers and its job clients reach the emulators without pasting the export lines first.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyflink_gcp.tools.cluster.config import ClusterError, ClusterSettings
from pyflink_gcp.tools.cluster.standalone import StandaloneCluster
from pyflink_gcp.tools.emulators import cache_root
from pyflink_gcp.tools.emulators.commands import ENV_FILE, control_root
from pyflink_gcp.tools.emulators.processes import Stopped, pid_alive, stop_on_signals

__all__ = ["down", "emulator_env", "parse_env", "running_clusters", "state_root", "up"]


def state_root() -> Path:
    """Where each running ``cluster up`` keeps its state file, named by its pid."""
    return cache_root() / "cluster"


def running_clusters(root: Path | None = None) -> list[dict[str, Any]]:
    """The states of the ``cluster up`` processes still alive; stale files are removed."""
    root = root or state_root()
    found = []
    for path in sorted(root.glob("*.json")) if root.is_dir() else ():
        try:
            state = json.loads(path.read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid_alive(pid):
            found.append(state)
        else:
            path.unlink(missing_ok=True)
    return found


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as a mapping.

    Raises:
        SystemExit: An argument without ``=`` or with an empty name.
    """
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"pyflink-gcp: --env takes NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def emulator_env(pid: int | None = None, root: Path | None = None) -> dict[str, str]:
    """The variables of the running ``pyflink-gcp emulators up`` (the one with ``pid``).

    Raises:
        ClusterError: Not exactly one such process runs, or it has not published its
            variables yet (it does once every emulator is ready).
    """
    root = root or control_root()
    running = [
        d
        for d in (root.iterdir() if root.is_dir() else ())
        if d.name.isdigit() and pid_alive(int(d.name)) and (pid is None or d.name == str(pid))
    ]
    if len(running) != 1:
        found = ", ".join(d.name for d in running) or "none"
        raise ClusterError(
            "--env-from-emulators needs exactly one running `pyflink-gcp emulators up`"
            f"{f' with pid {pid}' if pid is not None else ''} (found: {found}; pass "
            "--emulators-pid)"
        )
    path = running[0] / ENV_FILE
    try:
        env = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ClusterError(
            f"`pyflink-gcp emulators up` (pid {running[0].name}) has not published its "
            f"variables in {path} yet: {err}"
        ) from err
    return {str(k): str(v) for k, v in env.items()}


def _print_ready(cluster: StandaloneCluster, took: float) -> None:
    settings = cluster.settings
    conf = shlex.quote(str(cluster.layout.conf))
    flink = shlex.quote(str(cluster.flink))
    print(
        f"# pyflink-gcp cluster ready in {took:.1f} s: a JobManager and "
        f"{settings.taskmanagers} TaskManager(s) of {settings.slots} slot(s); logs in "
        f"{cluster.layout.log}",
        file=sys.stderr,
    )
    print(f"# REST API and web UI: {cluster.rest_url}", file=sys.stderr)
    print(f"export FLINK_CONF_DIR={conf}")
    sys.stdout.flush()
    print(
        "# Submit a job from another shell (the FLINK_CONF_DIR above points the client at "
        f"this cluster):\n#   FLINK_CONF_DIR={conf} {flink} run -p 4 -py my_job.py\n"
        f"# Ctrl-C or `pyflink-gcp cluster down` (pid {os.getpid()}) stops it.",
        file=sys.stderr,
        flush=True,
    )


def up(
    settings: ClusterSettings,
    env: Mapping[str, str],
    *,
    start_timeout: float = 180.0,
) -> int:
    """Runs a cluster in the foreground until interrupted; returns the exit status.

    The status is 1 when a process of the cluster died on its own meanwhile (its logs are then
    kept and named), 0 otherwise.
    """
    # As for `emulators up`: SIGINT explicitly (a shell starts background jobs with it
    # ignored), SIGHUP unless ignored (nohup).
    stop_on_signals()
    started = time.monotonic()
    cluster = StandaloneCluster(settings, env=env, start_timeout=start_timeout)
    state = state_root() / f"{os.getpid()}.json"
    reported: set[str] = set()
    try:
        cluster.start()
        state.parent.mkdir(parents=True, exist_ok=True)
        partial = state.with_name(f".{state.name}.part")
        partial.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "rest_url": cluster.rest_url,
                    "conf_dir": str(cluster.layout.conf),
                    "log_dir": str(cluster.layout.log),
                    "flink": str(cluster.flink),
                }
            )
        )
        partial.replace(state)
        _print_ready(cluster, time.monotonic() - started)
        while True:
            time.sleep(0.5)
            for line in cluster.died():
                if line not in reported:
                    reported.add(line)
                    print(f"pyflink-gcp: {line}", file=sys.stderr, flush=True)
    except (KeyboardInterrupt, Stopped):
        print("# stopping the cluster", file=sys.stderr, flush=True)
    except ClusterError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        reported.add(str(err))
    finally:
        state.unlink(missing_ok=True)
        if reported:
            cluster.keep_logs = True
        cluster.stop()
        kept = cluster.logs_kept()
        if kept is not None:
            print(f"# cluster logs kept in {kept}", file=sys.stderr)
    return 1 if reported else 0


def down(pid: int | None = None, timeout: float = 60.0) -> int:
    """Asks the running ``cluster up`` to stop (SIGTERM) and waits until it ended."""
    running = [s for s in running_clusters() if pid is None or int(s["pid"]) == pid]
    if len(running) != 1:
        found = ", ".join(str(s["pid"]) for s in running) or "none"
        print(
            f"pyflink-gcp: down needs exactly one running `pyflink-gcp cluster up`"
            f"{f' with pid {pid}' if pid is not None else ''} (found: {found}; pass --pid)",
            file=sys.stderr,
        )
        return 1
    target = int(running[0]["pid"])
    os.kill(target, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(target):
        if time.monotonic() > deadline:
            print(
                f"pyflink-gcp: `cluster up` (pid {target}) still runs after {timeout:.0f} s",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.2)
    print(f"pyflink-gcp: cluster {running[0]['rest_url']} (pid {target}) stopped")
    return 0
