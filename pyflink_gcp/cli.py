"""The ``pyflink-gcp`` command line.

Commands of the library:

* ``pyflink-gcp plan`` dry-runs a sink's routing over a sample (:mod:`pyflink_gcp.routing.plan`);
* ``pyflink-gcp bridge build`` compiles the Java bridge jar
  (:mod:`pyflink_gcp.tools.bridge_build`);
* ``pyflink-gcp --version`` prints the installed version.

Commands of the development tools (:mod:`pyflink_gcp.tools`):

* ``pyflink-gcp emulators setup|up|restart`` installs, runs and restarts the local emulator
  stack (:mod:`pyflink_gcp.tools.emulators.commands`);
* ``pyflink-gcp cluster up|down`` runs a standalone Flink cluster from the apache-flink wheel
  (:mod:`pyflink_gcp.tools.cluster.commands`);
* ``pyflink-gcp sql-client [--print-classpath] ...`` runs the wheel's Flink SQL client with the
  SQL connectors, every other argument going to ``sql-client.sh``
  (:mod:`pyflink_gcp.tools.sql_client`).

Each command imports what it runs when it runs, so the parser and ``import pyflink_gcp.cli``
load nothing of the tools.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

__all__ = ["main"]

#: The names are checked by the emulator commands, so parsing needs nothing of the tools.
_SERVICES_HELP = "services to use, by name or comma-separated (default: all of the stack's)"


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
        prog="pyflink-gcp",
        description="Routing dry runs, the Java bridge and the development tools of pyflink-gcp.",
    )
    parser.add_argument(
        "--version", action="version", version=f"pyflink-gcp {version()}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    emulators = commands.add_parser("emulators", help="the local Google Cloud emulator stack")
    actions = emulators.add_subparsers(dest="action", required=True)
    services_help = _SERVICES_HELP

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
    restart.add_argument("service", help="the emulator to restart (pubsub, bigquery, ...)")
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
    # Listed for --help only: main() hands everything after "sql-client" to the tool untouched.
    commands.add_parser(
        "sql-client",
        add_help=False,
        help="Flink's SQL client from the apache-flink wheel with the gcp-* connectors "
        "(fetches the SQL gateway jar once; --print-classpath shows where things are; "
        "other arguments go to sql-client.sh)",
    )
    from pyflink_gcp.routing import plan

    plan.add_arguments(
        commands.add_parser(
            "plan",
            help="dry-run a sink's routing over a sample (exit 1 when the sink would fail the "
            "job or a bound would be exceeded)",
            # The docstring's first paragraph, without its reStructuredText literal quotes.
            description=(plan.__doc__ or "").split("\n\n")[0].replace("``", ""),
            epilog=plan.EXIT_STATUS,
        )
    )
    return parser


def _cluster(args: argparse.Namespace) -> int:
    from pyflink_gcp.tools.cluster import ClusterError, ClusterSettings
    from pyflink_gcp.tools.cluster import commands as cluster_commands

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
    from pyflink_gcp.core.errors import ConfigurationError
    from pyflink_gcp.tools.bridge_build import build

    started = time.monotonic()
    try:
        jar = build(force=force)
    except ConfigurationError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1
    print(f"Java bridge ready in {time.monotonic() - started:.1f} s: {jar.name}")
    return 0


def _emulators(args: argparse.Namespace) -> int:
    from pyflink_gcp.tools.emulators import EmulatorError
    from pyflink_gcp.tools.emulators import commands as emulator_commands

    try:
        if args.action == "setup":
            return emulator_commands.setup(emulator_commands.parse_services(args.services))
        if args.action == "up":
            return emulator_commands.up(
                emulator_commands.parse_services(args.services), args.project
            )
        return emulator_commands.restart(args.service, args.pid, args.timeout)
    except EmulatorError as err:
        print(f"pyflink-gcp: {err}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["sql-client"]:
        from pyflink_gcp.tools import sql_client

        return sql_client.run(arguments[1:])
    args = _parser().parse_args(arguments)
    if args.command == "emulators":
        return _emulators(args)
    if args.command == "cluster":
        return _cluster(args)
    if args.command == "bridge" and args.action == "build":
        return _build_bridge(args.force)
    if args.command == "plan":
        from pyflink_gcp.routing import plan

        return plan.run(args)
    raise AssertionError(f"unhandled command {args}")  # argparse rejects anything else


if __name__ == "__main__":
    sys.exit(main())
