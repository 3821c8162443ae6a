"""The ``pyflink-gcp`` command line.

``pyflink-gcp emulators setup`` installs the emulator tools once and ``pyflink-gcp bridge
build`` compiles the Java bridge jar (``make test`` runs both); ``pyflink-gcp emulators up``
runs the whole local stack in the foreground and prints the ``export`` lines that point
another terminal's clients and jobs at it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from pyflink_gcp.emulators import ALL_SERVICES, EmulatorError, EmulatorStack, setup_tools

__all__ = ["main"]


class _Stop(Exception):
    """Raised from a signal handler to leave the foreground wait and stop the stack."""


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyflink-gcp", description="Tools for pyflink-gcp development."
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
    bridge = commands.add_parser("bridge", help="the Java bridge jar")
    bridge_actions = bridge.add_subparsers(dest="action", required=True)
    build = bridge_actions.add_parser(
        "build", help="compile the jar against the installed Flink (skipped when up to date)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    return parser


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


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _up(services: tuple[str, ...], project: str) -> int:
    # Installed before the stack starts, so the stack's own SIGTERM clean-up chains to it
    # and the foreground wait below ends normally. SIGINT is taken explicitly because a
    # shell starts background jobs with it ignored, and `kill -INT` must still stop us;
    # SIGHUP is left alone when ignored (nohup).
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_stop)
    started = time.monotonic()
    stack = EmulatorStack(services=services, project=project)
    status = 1
    try:
        stack.start()
        print(
            f"# pyflink-gcp emulators ready in {time.monotonic() - started:.1f} s; "
            f"logs in {stack.log_dir}. Paste these lines into another shell:",
            file=sys.stderr,
        )
        for name, value in sorted(stack.env.items()):
            print(f"export {name}={shlex.quote(value)}")
        sys.stdout.flush()
        print("# Ctrl-C stops every emulator.", file=sys.stderr, flush=True)
        while True:
            time.sleep(1.0)
            for name, process in stack.processes.items():
                code = process.exited()
                if code is not None:
                    print(
                        f"pyflink-gcp: the {name} emulator exited with code {code}; stopping. "
                        f"Log {process.log_path}:\n{process.log_tail()}",
                        file=sys.stderr,
                    )
                    return 1
    except (KeyboardInterrupt, _Stop):
        print("# stopping the emulators", file=sys.stderr, flush=True)
        status = 0
        return status
    finally:
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
    except EmulatorError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args}")  # argparse rejects anything else


if __name__ == "__main__":
    sys.exit(main())
