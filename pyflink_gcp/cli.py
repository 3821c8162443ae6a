"""The ``pyflink-gcp`` command line.

``pyflink-gcp emulators setup`` installs the emulator tools once and ``pyflink-gcp bridge
build`` compiles the Java bridge jar (``make test`` runs both); ``pyflink-gcp emulators up``
runs the whole local stack in the foreground and prints the ``export`` lines that point
another terminal's clients and jobs at it; ``pyflink-gcp emulators restart SERVICE`` asks that
running ``up`` to restart one emulator on the same port. ``pyflink-gcp cluster up`` runs a
standalone Flink cluster from the apache-flink wheel in the foreground and ``pyflink-gcp cluster
down`` stops it from another shell (:mod:`pyflink_gcp.cluster.commands`). ``pyflink-gcp
--version`` prints the installed version.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyflink_gcp.emulators import (
    ALL_SERVICES,
    EmulatorError,
    EmulatorStack,
    cache_root,
    setup_tools,
)
from pyflink_gcp.emulators.processes import Stopped, pid_alive, stop_on_signals

__all__ = ["main"]


def _services(values: Sequence[str] | None) -> tuple[str, ...]:
    """Accepts ``--services a b`` as well as ``--services a,b``."""
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


def version() -> str:
    """The installed distribution's version, or the package's own ``__version__`` when it runs
    from a source tree that is not installed."""
    from importlib import metadata

    try:
        return metadata.version("pyflink-gcp")
    except metadata.PackageNotFoundError:
        from pyflink_gcp import __version__

        return __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyflink-gcp", description="Tools for pyflink-gcp development."
    )
    parser.add_argument(
        "--version", action="version", version=f"pyflink-gcp {version()}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    emulators = commands.add_parser("emulators", help="the local Google Cloud emulator stack")
    actions = emulators.add_subparsers(dest="action", required=True)
    services_help = f"services to use (default: all of {', '.join(ALL_SERVICES)})"

    setup = actions.add_parser("setup", help="install the emulator tools (cached, idempotent)")
    setup.add_argument("--services", nargs="+", metavar="SERVICE", help=services_help)

    up = actions.add_parser(
        "up", help="start the emulators, print export lines, and wait until interrupted"
    )
    up.add_argument("--services", nargs="+", metavar="SERVICE", help=services_help)
    up.add_argument("--project", default="test-project", help="project id (default: %(default)s)")
    restart = actions.add_parser(
        "restart",
        help="restart one emulator of the running `emulators up` on the same port (it comes "
        "back empty)",
    )
    restart.add_argument("service", choices=[s for s in ALL_SERVICES if s != "receiver"])
    restart.add_argument(
        "--pid", type=int, help="the pid of the `emulators up` to ask, when several run"
    )
    restart.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait (default: %(default)s)"
    )
    bridge = commands.add_parser("bridge", help="the Java bridge jar")
    bridge_actions = bridge.add_subparsers(dest="action", required=True)
    build = bridge_actions.add_parser(
        "build", help="compile the jar against the installed Flink (skipped when up to date)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    cluster = commands.add_parser(
        "cluster", help="a standalone Flink cluster from the installed apache-flink wheel"
    )
    cluster_actions = cluster.add_subparsers(dest="action", required=True)
    cluster_up = cluster_actions.add_parser(
        "up",
        help="start a JobManager and TaskManagers, print how to submit, wait until interrupted",
    )
    cluster_up.add_argument(
        "--taskmanagers", type=int, default=2, help="TaskManagers (default: %(default)s)"
    )
    cluster_up.add_argument(
        "--slots", type=int, default=2, help="slots per TaskManager (default: %(default)s)"
    )
    cluster_up.add_argument(
        "--env-from-emulators",
        action="store_true",
        help="pass the variables of the running `pyflink-gcp emulators up` to the cluster",
    )
    cluster_up.add_argument(
        "--emulators-pid", type=int, help="the pid of that `emulators up`, when several run"
    )
    cluster_up.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one more variable for the TaskManagers and job clients (repeatable)",
    )
    cluster_up.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to start (default: %(default)s)"
    )
    cluster_down = cluster_actions.add_parser("down", help="stop the running `cluster up`")
    cluster_down.add_argument(
        "--pid", type=int, help="the pid of the `cluster up` to stop, when several run"
    )
    cluster_down.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait (default: %(default)s)"
    )
    from pyflink_gcp.routing import plan

    plan.add_arguments(
        commands.add_parser(
            "plan",
            help="dry-run a sink's routing over a sample (exit 1 when a bound would be exceeded)",
            description=(plan.__doc__ or "").split("\n\n")[0],
        )
    )
    return parser


def _cluster(args: argparse.Namespace) -> int:
    from pyflink_gcp.cluster import ClusterError, ClusterSettings
    from pyflink_gcp.cluster import commands as cluster_commands

    try:
        if args.action == "down":
            return cluster_commands.down(args.pid, args.timeout)
        env = cluster_commands.emulator_env(args.emulators_pid) if args.env_from_emulators else {}
        env.update(cluster_commands.parse_env(args.env))
        settings = ClusterSettings(taskmanagers=args.taskmanagers, slots=args.slots)
        return cluster_commands.up(settings, env, start_timeout=args.timeout)
    except (ClusterError, ValueError) as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1


def _build_bridge(force: bool) -> int:
    from pyflink_gcp.core.bridge import build
    from pyflink_gcp.core.errors import ConfigurationError

    started = time.monotonic()
    try:
        jar = build(force=force)
    except ConfigurationError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1
    print(f"Java bridge ready in {time.monotonic() - started:.1f} s: {jar.name}")
    return 0


def _setup(services: tuple[str, ...]) -> int:
    started = time.monotonic()
    tools = setup_tools(services)
    for action in tools.actions:
        print(action)
    print(f"emulator tools ready in {time.monotonic() - started:.1f} s (cache: {tools.cache})")
    return 0


def _control_root() -> Path:
    """Where each running ``up`` keeps its control directory, named by its pid."""
    return cache_root() / "up"


def _serve_restarts(stack: EmulatorStack, control: Path, dead: set[str]) -> None:
    """Carries out the restart requests ``pyflink-gcp emulators restart`` left in ``control``."""
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


def _restart(service: str, pid: int | None, timeout: float) -> int:
    """Asks a running ``up`` to restart ``service`` and waits for its answer."""
    root = _control_root()
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


def _up(services: tuple[str, ...], project: str) -> int:
    # Installed before the stack starts, so the stack's own SIGTERM clean-up chains to it
    # and the foreground wait below ends normally. SIGINT is taken explicitly because a
    # shell starts background jobs with it ignored, and `kill -INT` must still stop us;
    # SIGHUP is left alone when ignored (nohup).
    stop_on_signals()
    started = time.monotonic()
    stack = EmulatorStack(services=services, project=project)
    status = 1
    control = _control_root() / str(os.getpid())
    dead: set[str] = set()
    try:
        stack.start()
        control.mkdir(parents=True, exist_ok=True)
        # For `pyflink-gcp cluster up --env-from-emulators`.
        (control / "env.json").write_text(json.dumps(stack.env))
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
            _serve_restarts(stack, control, dead)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "emulators" and args.action == "setup":
            return _setup(_services(args.services))
        if args.command == "bridge" and args.action == "build":
            return _build_bridge(args.force)
        if args.command == "emulators" and args.action == "up":
            return _up(_services(args.services), args.project)
        if args.command == "emulators" and args.action == "restart":
            return _restart(args.service, args.pid, args.timeout)
        if args.command == "cluster":
            return _cluster(args)
        if args.command == "plan":
            from pyflink_gcp.routing import plan

            return plan.run(args)
    except EmulatorError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args}")  # argparse rejects anything else


if __name__ == "__main__":
    sys.exit(main())
