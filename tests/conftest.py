"""Shared pytest wiring: one local emulator stack for the whole session.

The stack starts before the session's first test when any of its tests needs it, so a run
of unit tests never pays for it. Its variables go into ``os.environ`` for the rest of the
session, because PyFlink jobs run their Python workers in subprocesses that inherit
the environment and find the emulators through it (before any JVM is launched: a process
worker is the JVM's child, and inherits the JVM's environment).
"""

from __future__ import annotations

import os
import tempfile
import threading
import warnings
from collections.abc import Iterator

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.gateway import drain_gateway_stderr, ended_gateways
from pyflink_gcp.tools import bridge_build
from pyflink_gcp.tools.emulators import (
    ALL_SERVICES,
    EmulatorStack,
    Receiver,
    setup_tools,
    stop_all_stacks,
)

PROJECT = "test-project"

#: The Java gateway's standard error, drained into this file for the whole session: one
#: gateway runs hundreds of jobs here, and PyFlink leaves that output in a pipe nobody reads,
#: which stalls the JVM once full (:mod:`pyflink_gcp.core.gateway`).
GATEWAY_STDERR = os.path.join(tempfile.gettempdir(), f"pyflink-gcp-tests-gateway-{os.getpid()}.log")
drain_gateway_stderr(GATEWAY_STDERR)


def _gateway_stdout_to_the_file() -> None:
    """The gateway's standard output goes to :data:`GATEWAY_STDERR` as well.

    PyFlink starts the JVM with this process's standard output, which pytest-xdist points at
    /dev/null in its workers; the gateway's own reason for ending itself ("Unable to get the
    Python watchdog object, now exit.") is printed there. Descriptor 1 points at the file only
    while the JVM is spawned, so this process's own output is untouched.
    """
    from pyflink import java_gateway

    start = java_gateway.launch_gateway_server_process

    def start_with_stdout_in_the_file(*args: object, **kwargs: object) -> object:
        saved = os.dup(1)
        target = os.open(GATEWAY_STDERR, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.dup2(target, 1)
            return start(*args, **kwargs)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(target)

    java_gateway.launch_gateway_server_process = start_with_stdout_in_the_file


_gateway_stdout_to_the_file()


def pytest_configure(config: pytest.Config) -> None:
    """Silences the client libraries' deprecation notices about the pinned runtime.

    Python 3.11 and grpcio < 1.66 are what PyFlink 2.3 supports; the notices say nothing
    about the code under test.
    """
    config.addinivalue_line("filterwarnings", "ignore:You are using a Python version:FutureWarning")
    config.addinivalue_line("filterwarnings", "ignore:grpcio < 1.83.0:FutureWarning")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Rebuilds the Java bridge jar when its sources changed since ``make setup``.

    The library only looks the jar up, so a run straight after an edit of ``java-bridge/``
    would otherwise test the old operators. Up to date, this only hashes the sources.
    """
    try:
        bridge_build.build()
    except ConfigurationError as err:
        warnings.warn(f"the tests run without a current Java bridge jar: {err}", stacklevel=1)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Starts building the null backend (bench/nullbackend, Go) in the background when a
    collected test module needs it (``USES_NULL_BACKEND = True``).

    On a clean machine the build downloads its modules and compiles for up to a minute or two;
    begun here it overlaps the tests before that module. The module's own call to ``build()``
    waits on the build's lock and finds the binary ready; should this build fail, that call
    builds again and raises the error where it belongs.
    """
    if not any(
        getattr(getattr(item, "module", None), "USES_NULL_BACKEND", False) for item in items
    ):
        return

    def build() -> None:
        from bench._nullbackend import build as build_null_backend

        try:
            build_null_backend()
        except Exception:  # noqa: BLE001 - the test's own build reports it
            pass

    threading.Thread(target=build, name="null-backend-build", daemon=True).start()


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Iterator[EmulatorStack]:
    """All emulators, started once per session and stopped at its end (even on failure).

    The emulator logs are kept (their directory is printed) only when a test failed.
    """
    setup_tools(ALL_SERVICES)
    with EmulatorStack(services=ALL_SERVICES, project=PROJECT) as emulators:
        previous = {name: os.environ.get(name) for name in emulators.env}
        os.environ.update(emulators.env)
        try:
            yield emulators
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            emulators.keep_logs = request.session.testsfailed > 0
            if emulators.keep_logs:
                _notes.append(f"emulator logs kept in {emulators.log_dir}")


@pytest.fixture(scope="session", autouse=True)
def _emulators_before_any_job(request: pytest.FixtureRequest) -> None:
    """Starts the emulator stack before the session's first test, whichever it is, when any
    test of the session needs it.

    A Python worker in process mode is a child of the JVM and inherits the JVM's environment,
    not this process's. Started lazily, the stack's variables reached ``os.environ`` only at
    the first test that asked for it; a JVM launched before that (by a job of a test without
    an emulator) ran workers that found none, and a later test's job failed asking for
    Google credentials, depending on the order its worker ran the tests in.
    """
    if any("stack" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("stack")


@pytest.fixture(scope="session")
def project(stack: EmulatorStack) -> str:
    """The project id the emulators are set up for."""
    return stack.project


@pytest.fixture
def receiver(stack: EmulatorStack) -> Receiver:
    """The stack's HTTP receiver, emptied before the test."""
    stack.clear_received()
    return stack.receiver


#: Lines for the end of the run's summary: where kept logs are, and when the gateway ended.
#: Under pytest-xdist each worker collects its own and hands them to the controlling process
#: (``workeroutput``), which prints them: a worker's own output never reaches the terminal.
_notes: list[str] = []
_gateway_noted: list[bool] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """Notes the test after which the Java gateway was first found ended: every later test
    that uses PyFlink then fails with "... does not exist in the JVM", and the exit status
    (a signal, or the JVM's own exit code) is the clue to why."""
    report: pytest.TestReport = yield
    if report.when == "teardown" and not _gateway_noted:
        ended = ended_gateways()
        if ended:
            _gateway_noted.append(True)
            _notes.append(
                f"the Java gateway ended during the run, found after {item.nodeid}: "
                + "; ".join(ended)
            )
            _notes.extend(_gateway_last_words(ended))
    return report


def _gateway_last_words(ended: list[str], lines: int = 20) -> list[str]:
    """The end of the gateway's output (both streams), and the JVM's crash file if it left one: with
    the exit status, what tells a crash (hs_err), Flink's fatal-error exit (its handler logs
    the exception, then exits with -17) and PyFlink's watchdog exit (code 1, nothing logged)
    apart. Printed in the summary because CI keeps no file of the run."""
    found: list[str] = []
    try:
        with open(GATEWAY_STDERR, "rb") as f:
            f.seek(max(0, os.path.getsize(GATEWAY_STDERR) - 16384))
            tail = f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        tail = []
    if tail:
        found.append(f"the last {len(tail)} lines of the gateway's output:")
        found.extend(f"  | {line[:300]}" for line in tail)
    else:
        found.append("the gateway wrote nothing")
    for how in ended:
        pid = how.split()[1]
        crash = os.path.join(os.getcwd(), f"hs_err_pid{pid}.log")
        if os.path.exists(crash):
            with open(crash, errors="replace") as f:
                head = f.read(4096).splitlines()[:25]
            found.append(f"the JVM crashed; the head of {crash}:")
            found.extend(f"  | {line[:300]}" for line in head)
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Last resort: no emulator may outlive the run, whatever happened to the fixtures. The
    gateway's standard error is kept (its file is named in the summary) only when a test
    failed."""
    stop_all_stacks()
    if os.path.exists(GATEWAY_STDERR):
        if session.testsfailed and os.path.getsize(GATEWAY_STDERR):
            _notes.append(f"the Java gateway's standard error is in {GATEWAY_STDERR}")
        else:
            os.remove(GATEWAY_STDERR)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["pyflink_gcp_notes"] = list(_notes)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """Takes a pytest-xdist worker's notes into the controlling process's summary."""
    _notes.extend(getattr(node, "workeroutput", {}).get("pyflink_gcp_notes", []))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """The notes come last, after the short summary of failures: where a run's output is cut
    to its end (CI shows its tail), they are what remains."""
    result = yield
    for line in _notes:
        terminalreporter.write_line(line)
    return result
