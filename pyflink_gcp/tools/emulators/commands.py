"""``pyflink-gcp emulators setup``, ``up`` and ``restart``.

``up`` runs an :class:`EmulatorStack` in the foreground: it prints the ``export`` lines that
point another shell's clients and jobs at the stack and stops every emulator at Ctrl-C (or
SIGTERM, SIGHUP). While it runs it keeps a control directory (``<cache>/up/<pid>/``). It holds
the stack's variables (``env.json``, read by ``pyflink-gcp cluster up --env-from-emulators``)
and the restart requests: ``restart`` drops a request file there, and ``up`` restarts that
emulator on the same port and writes the outcome beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyflink_gcp.tools.emulators.processes import (
    EmulatorError,
    Stopped,
    pid_alive,
    stop_on_signals,
)
from pyflink_gcp.tools.emulators.stack import EmulatorStack
from pyflink_gcp.tools.emulators.tools import ALL_SERVICES, cache_root, setup_tools

__all__ = [
    "ENV_FILE",
    "control_root",
    "parse_services",
    "restart",
    "serve_restarts",
    "setup",
    "up",
]

#: The file of a running ``up``'s control directory that holds the stack's variables.
ENV_FILE = "env.json"


def control_root() -> Path:
    """Where each running ``up`` keeps its control directory, named by its pid."""
    return cache_root() / "up"


def parse_services(values: Sequence[str] | None) -> tuple[str, ...]:
    """The services named by ``--services a b`` or ``--services a,b``; all when none.

    Raises:
        SystemExit: A name that is not one of :data:`ALL_SERVICES`.
    """
    if not values:
        return ALL_SERVICES
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_SERVICES]
    if unknown:
        raise SystemExit(
            f"pyflink-gcp: unknown service(s) {', '.join(unknown)}; "
            f"choose from {', '.join(ALL_SERVICES)}"
        )
    return tuple(dict.fromkeys(names))


def setup(services: tuple[str, ...]) -> int:
    """Installs the tools ``services`` need (cached, idempotent); returns the exit status."""
    started = time.monotonic()
    tools = setup_tools(services)
    for action in tools.actions:
        print(action)
    print(f"emulator tools ready in {time.monotonic() - started:.1f} s (cache: {tools.cache})")
    return 0


def serve_restarts(stack: EmulatorStack, control: Path, dead: set[str]) -> None:
    """Carries out the restart requests that ``restart`` left in ``control``.

    A restarted service leaves ``dead``; the outcome (``ok: ...`` or ``error: ...``) is
    written atomically to ``restart-<service>.result``.
    """
    for request in sorted(control.glob("restart-*")):
        if request.suffix == ".result":
            continue
        service = request.name.removeprefix("restart-")
        request.unlink(missing_ok=True)
        print(f"# restarting the {service} emulator", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            stack.restart(service)
        except EmulatorError as err:
            outcome = f"error: {err}"
        else:
            dead.discard(service)
            outcome = f"ok: {service} restarted in {time.monotonic() - started:.1f} s"
        print(f"# {outcome}", file=sys.stderr, flush=True)
        result = control / f"restart-{service}.result"
        partial = control / f".restart-{service}.result"
        partial.write_text(outcome)
        partial.replace(result)


def restart(service: str, pid: int | None, timeout: float) -> int:
    """Asks the running ``up`` to restart ``service``, waits for its answer; the exit status."""
    restartable = [s for s in ALL_SERVICES if s != "receiver"]
    if service not in restartable:
        print(
            f"pyflink-gcp: cannot restart {service!r}; choose from {', '.join(restartable)}",
            file=sys.stderr,
        )
        return 2
    root = control_root()
    running = [
        d
        for d in (root.iterdir() if root.is_dir() else ())
        if d.name.isdigit() and pid_alive(int(d.name))
    ]
    if pid is not None:
        running = [d for d in running if d.name == str(pid)]
    if len(running) != 1:
        found = ", ".join(d.name for d in running) or "none"
        print(
            f"pyflink-gcp: restart needs exactly one running `pyflink-gcp emulators up`"
            f"{f' with pid {pid}' if pid is not None else ''} (found: {found}; pass --pid)",
            file=sys.stderr,
        )
        return 1
    control = running[0]
    result = control / f"restart-{service}.result"
    result.unlink(missing_ok=True)
    request = control / f".restart-{service}.{os.getpid()}"
    request.write_text("")
    request.replace(control / f"restart-{service}")
    deadline = time.monotonic() + timeout
    while not result.exists():
        if not pid_alive(int(control.name)):
            print(f"pyflink-gcp: `emulators up` (pid {control.name}) ended", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"pyflink-gcp: no answer to the restart within {timeout:.0f} s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    outcome = result.read_text()
    result.unlink(missing_ok=True)
    print(f"pyflink-gcp: {outcome}", file=sys.stderr if outcome.startswith("error") else sys.stdout)
    return 0 if outcome.startswith("ok") else 1


def up(services: tuple[str, ...], project: str) -> int:
    """Runs the stack in the foreground until interrupted; returns the exit status.

    The status is 1 when an emulator died meanwhile and was not restarted (its logs are then
    kept and named).
    """
    # Installed before the stack starts, so the stack's own SIGTERM clean-up chains to it
    # and the foreground wait below ends normally. SIGINT is taken explicitly because a
    # shell starts background jobs with it ignored, and `kill -INT` must still stop us;
    # SIGHUP is left alone when ignored (nohup).
    stop_on_signals()
    started = time.monotonic()
    stack = EmulatorStack(services=services, project=project)
    status = 1
    control = control_root() / str(os.getpid())
    dead: set[str] = set()
    try:
        stack.start()
        control.mkdir(parents=True, exist_ok=True)
        (control / ENV_FILE).write_text(json.dumps(stack.env))
        print(
            f"# pyflink-gcp emulators ready in {time.monotonic() - started:.1f} s; "
            f"logs in {stack.log_dir}. Paste these lines into another shell:",
            file=sys.stderr,
        )
        for name, value in sorted(stack.env.items()):
            print(f"export {name}={shlex.quote(value)}")
        sys.stdout.flush()
        print(
            f"# Ctrl-C stops every emulator; `pyflink-gcp emulators restart SERVICE` (pid "
            f"{os.getpid()}) restarts one.",
            file=sys.stderr,
            flush=True,
        )
        while True:
            time.sleep(0.5)
            for name, process in stack.processes.items():
                how = process.describe_exit()
                if how is not None and name not in dead:
                    dead.add(name)
                    print(
                        f"pyflink-gcp: the {name} emulator {how}. Log {process.log_path}:\n"
                        f"{process.log_tail()}\n# the other emulators keep running; "
                        f"`pyflink-gcp emulators restart {name}` starts it again on the same "
                        "port.",
                        file=sys.stderr,
                        flush=True,
                    )
            serve_restarts(stack, control, dead)
    except (KeyboardInterrupt, Stopped):
        print("# stopping the emulators", file=sys.stderr, flush=True)
        # An emulator that died and was not restarted is a failure worth its logs.
        status = 1 if dead else 0
        return status
    finally:
        for leftover in control.glob("*") if control.is_dir() else ():
            leftover.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            control.rmdir()
        # The logs are only worth keeping when something went wrong.
        stack.keep_logs = status != 0
        if stack.keep_logs:
            print(f"# emulator logs kept in {stack.log_dir}", file=sys.stderr)
        stack.stop()
