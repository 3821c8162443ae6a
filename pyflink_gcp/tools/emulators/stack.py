"""The local emulator stack: every Google Cloud backend the sinks talk to, on 127.0.0.1.

One :class:`EmulatorStack` starts the requested emulators in parallel on free ports,
waits until each answers a real request, and exposes the environment variables that
point the client libraries (and the sinks) at them. Stopping it kills each emulator's
whole process group; live stacks are also stopped at interpreter exit and on SIGTERM,
so an interrupted test run does not leave JVMs holding ports.

This module is the orchestration the services share; how each emulator is launched (its
command, ports, readiness probe and variables) is in :mod:`pyflink_gcp.tools.emulators.launchers`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pyflink_gcp.tools.emulators.launchers import EmulatorLaunchers
from pyflink_gcp.tools.emulators.processes import (
    EmulatorError,
    EmulatorStartError,
    GroupReaper,
    ManagedProcess,
)
from pyflink_gcp.tools.emulators.receiver import Receiver
from pyflink_gcp.tools.emulators.tools import ALL_SERVICES, Tools, setup_tools

__all__ = ["EmulatorStack", "stop_all_stacks"]

# Variables a parent environment may carry that would point a child at the wrong
# Python or packages (the BigQuery venv and gcloud run their own interpreters).
_SCRUBBED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")

_live_lock = threading.Lock()
_live_stacks: set[EmulatorStack] = set()
_hooks_installed = False
_previous_sigterm: Any = None


def stop_all_stacks() -> None:
    """Stops every stack of this process that is still running.

    Runs at interpreter exit and on SIGTERM; test harnesses call it as a last resort
    so that no emulator outlives the run.
    """
    with _live_lock:
        stacks = list(_live_stacks)
    for stack in stacks:
        with contextlib.suppress(Exception):
            stack.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    stop_all_stacks()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # Behave like the default action, now that nothing is left behind.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_hooks() -> None:
    """Registers the atexit and SIGTERM clean-up once per process.

    The SIGTERM handler chains to whatever handler was there before; it can only be
    installed from the main thread, so a stack started elsewhere relies on atexit.
    """
    global _hooks_installed, _previous_sigterm
    with _live_lock:
        if _hooks_installed:
            return
        atexit.register(stop_all_stacks)
        if threading.current_thread() is threading.main_thread():
            _previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
        _hooks_installed = True


class EmulatorStack(EmulatorLaunchers):
    """Starts and stops the local emulators for a set of services.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`)::

        with EmulatorStack(services=("pubsub", "bigquery")) as stack:
            os.environ.update(stack.env)

    Attributes:
        services: The started services, in :data:`ALL_SERVICES` order.
        project: The project id every emulator is set up for.
        spanner_instance: The Spanner instance created at start.
        spanner_database: The Spanner database created at start.
        log_dir: Where each emulator's stdout/stderr log (``<service>.log``) is kept;
            it survives :meth:`stop` so a failure can be investigated afterwards.
        processes: The emulator processes by service (the receiver is a thread).
        keep_logs: Whether :meth:`stop` keeps :attr:`log_dir`.
    """

    def __init__(
        self,
        services: Iterable[str] = ALL_SERVICES,
        project: str = "test-project",
        *,
        spanner_instance: str = "test-instance",
        spanner_database: str = "test-db",
        start_timeout: float = 90.0,
        log_dir: str | os.PathLike[str] | None = None,
        keep_logs: bool = True,
    ) -> None:
        """Prepares a stack; nothing starts before :meth:`start`.

        Args:
            services: Service names from :data:`ALL_SERVICES`.
            project: The project id for the emulators and ``GOOGLE_CLOUD_PROJECT``.
            spanner_instance: The Spanner instance to create.
            spanner_database: The Spanner database to create in it.
            start_timeout: Seconds each emulator may take to become ready; generous
                because a JVM starts slowly on a loaded machine.
            log_dir: Where to write the logs; a new temporary directory by default.
            keep_logs: Whether :meth:`stop` keeps a temporary ``log_dir`` for a
                post-mortem; a ``log_dir`` passed in is never removed.

        Raises:
            ValueError: An unknown service name.
        """
        wanted = set(services)
        unknown = wanted.difference(ALL_SERVICES)
        if unknown:
            raise ValueError(
                f"unknown service(s) {sorted(unknown)}; choose from {list(ALL_SERVICES)}"
            )
        self.services: tuple[str, ...] = tuple(s for s in ALL_SERVICES if s in wanted)
        self.project = project
        self.spanner_instance = spanner_instance
        self.spanner_database = spanner_database
        self.start_timeout = start_timeout
        self._root = Path(tempfile.mkdtemp(prefix="pyflink-gcp-emulators-"))
        self._data = self._root / "data"
        self.log_dir = Path(log_dir) if log_dir is not None else self._root / "logs"
        self.keep_logs = keep_logs or log_dir is not None
        self.processes: dict[str, ManagedProcess] = {}
        self._ports: dict[str, list[int]] = {}
        self._env: dict[str, str] = {}
        self._receiver: Receiver | None = None
        self._reaper: GroupReaper | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self._started = False
        self._tools: Tools | None = None

    # -- public interface -------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The variables that point clients at the started emulators (a copy).

        ``STORAGE_EMULATOR_HOST`` and ``PYFLINK_GCP_RECEIVER_URL`` are URLs; every
        other endpoint is ``host:port``.
        """
        return dict(self._env)

    @property
    def receiver(self) -> Receiver:
        """The in-process HTTP receiver.

        Raises:
            EmulatorError: The stack was not started with the ``receiver`` service.
        """
        if self._receiver is None:
            raise EmulatorError("this stack has no receiver: start it with 'receiver' in services")
        return self._receiver

    @property
    def receiver_url(self) -> str:
        """The receiver's base URL, ``http://127.0.0.1:PORT``."""
        return self.receiver.url

    def received(self) -> list[dict[str, Any]]:
        """The requests the receiver got so far (method, path, headers, body bytes)."""
        return self.receiver.received()

    def clear_received(self) -> None:
        """Forgets the requests the receiver got so far."""
        self.receiver.clear_received()

    def __enter__(self) -> EmulatorStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> EmulatorStack:
        """Starts every service in parallel and waits until all are ready.

        A stack starts once; a second call returns it unchanged. Calls
        :func:`setup_tools` first (with a warm cache it only checks what is installed).

        Raises:
            EmulatorError: A tool is missing or an emulator did not become ready; the
                message includes the tail of that emulator's log. Whatever had started
                is stopped before raising.
        """
        if self._started:
            return self
        self._started = True
        try:
            self._tools = setup_tools(self.services)
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)  # nothing ran: no log to keep
            raise
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._data.mkdir(parents=True, exist_ok=True)
        # Stops the emulators even if this process is killed before it can.
        self._reaper = GroupReaper()
        with _live_lock:
            _live_stacks.add(self)
        _install_hooks()
        self._env["GOOGLE_CLOUD_PROJECT"] = self.project
        starters = self._starters()
        failures: list[tuple[str, Exception]] = []
        pool = ThreadPoolExecutor(max_workers=len(self.services) or 1)
        try:
            futures = {name: pool.submit(starters[name]) for name in self.services}
            for name, future in futures.items():
                try:
                    self._env.update(future.result())
                except Exception as err:  # noqa: BLE001 - collected and reported together below
                    failures.append((name, err))
        except BaseException:
            # Ctrl-C while waiting: killing the processes makes the starter threads'
            # readiness waits fail at once, so nothing waits out the start timeout.
            self.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if failures:
            self.stop()
            first_name, first = failures[0]
            others = ", ".join(name for name, _ in failures[1:])
            also = f" (also failed: {others})" if others else ""
            if isinstance(first, EmulatorError):
                raise type(first)(f"{first}{also}") from first
            raise EmulatorStartError(f"{first_name}: {first!r}{also}") from first
        return self

    def restart(self, service: str) -> None:
        """Stops one emulator and starts it again on the same ports.

        The exported variables stay right, so running clients and jobs reconnect. The
        emulator comes back empty (the Spanner instance and database are created again),
        like a fresh start; its log goes on in the same file.

        Raises:
            EmulatorError: The service is not an emulator of this running stack, or it did not
                become ready again (the message carries its log tail).
        """
        with self._lock:
            if not self._started or self._stopping:
                raise EmulatorError(f"{service}: the stack is not running")
        if service not in self.services or service == "receiver":
            emulators = [s for s in self.services if s != "receiver"]
            raise EmulatorError(
                f"cannot restart {service!r}: this stack's emulators are {', '.join(emulators)}"
            )
        process = self.processes.get(service)
        if process is not None:
            process.stop()
            if self._reaper is not None:
                self._reaper.forget(process.pgid)
        self._env.update(self._starters()[service]())

    def stop(self) -> None:
        """Stops every emulator's process group and the receiver; idempotent.

        The data directories are removed; the logs are kept in :attr:`log_dir` unless
        :attr:`keep_logs` was turned off (set it before stopping, for instance only
        once a run succeeded).
        """
        with self._lock:
            self._stopping = True
            processes = list(self.processes.values())
        threads = [threading.Thread(target=p.stop, daemon=True) for p in processes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=15)
        reaper = self._reaper
        if reaper is not None:
            if all(not p.alive() for p in processes):
                reaper.close()
            self._reaper = None
        if self._receiver is not None:
            with contextlib.suppress(Exception):
                self._receiver.stop()
        with _live_lock:
            _live_stacks.discard(self)
        shutil.rmtree(self._data, ignore_errors=True)
        if not self.keep_logs or not self.log_dir.is_relative_to(self._root):
            shutil.rmtree(self._root, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------

    def _spawn(
        self,
        name: str,
        argv: list[str],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        workdir = self._data / name
        workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(extra_env or {})
        with self._lock:
            if self._stopping:
                raise EmulatorError(f"{name}: the stack is stopping")
            process = ManagedProcess(
                name, argv, log_path=self.log_dir / f"{name}.log", env=env, cwd=workdir
            )
            if self._reaper is not None:
                self._reaper.watch(process.pgid)
            self.processes[name] = process
        return process

    def __repr__(self) -> str:
        state = "stopped" if self._stopping else ("started" if self._started else "new")
        return f"EmulatorStack(services={self.services!r}, project={self.project!r}, {state})"
