"""Process, port and readiness helpers for the local emulators.

The emulators are third-party programs, several of which fork children of their own
(``gcloud`` starts a JVM or a native gateway). Each one is therefore started in a new
session, so that it leads its own process group, and stopped by signalling that whole
group: killing only the direct child would leave the real server running and holding
its port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "EmulatorError",
    "EmulatorStartError",
    "ManagedProcess",
    "free_port",
    "group_members",
    "grpc_unary_probe",
    "http_json",
    "tcp_open",
    "wait_until",
]

LOOPBACK = "127.0.0.1"


class EmulatorError(RuntimeError):
    """A local emulator could not be set up, started or stopped."""


class EmulatorStartError(EmulatorError):
    """An emulator did not become ready; the message carries the tail of its log."""


def free_port(host: str = LOOPBACK) -> int:
    """Returns a TCP port that is free on ``host`` right now.

    Binding to port 0 lets the kernel choose, which avoids collisions with other
    stacks or services on the machine without a retry loop. The port is released
    before the emulator binds it; the window is small and every emulator is started
    on a distinct port chosen this way.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Tells whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_json(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 5.0,
) -> tuple[int, Any]:
    """Sends one plain-HTTP request and decodes a JSON answer.

    The stack talks to the emulators' REST ports with the standard library only, so
    that starting it needs none of the optional Google client libraries.

    Returns:
        The HTTP status and the decoded JSON body (``None`` when the body is empty
        or not JSON). HTTP error statuses are returned, not raised.

    Raises:
        OSError: The connection failed (refused, reset, timed out).
    """
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def grpc_unary_probe(target: str, method: str, parent: str, timeout: float = 2.0) -> None:
    """Makes one real unary gRPC call whose request has a single string field 1.

    ``List*`` calls (``ListTopics``, ``ListTables``, ``ListQueues``) take their parent
    resource name as field 1, so the request can be encoded by hand and the answer
    ignored. That proves the server answers RPCs (not just TCP) without importing
    any generated client. ``grpcio`` comes with PyFlink, so it is always there.

    Raises:
        Exception: The call failed; the caller retries until its deadline.
    """
    import grpc  # imported lazily: only the probes need it

    encoded = parent.encode()
    request = b"\x0a" + _encode_varint(len(encoded)) + encoded
    channel = grpc.insecure_channel(target)
    try:
        call = channel.unary_unary(method)
        call(request, timeout=timeout)
    finally:
        channel.close()


def _read_pgid(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[2]), fields[0]


def group_members(pgid: int) -> list[int]:
    """Lists the live (non-zombie) processes of a process group.

    ``/proc`` is read where it exists because ``killpg(pgid, 0)`` also succeeds for
    zombies, which an init process that does not reap would keep around forever.

    Returns:
        The pids of the group's live members, empty when none is left.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        info = _read_pgid(int(entry.name))
        if info is not None and info[0] == pgid and info[1] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


_REAPER_CODE = """
import os, signal, sys, time
groups = set()
for line in sys.stdin:
    word = line.strip()
    if word == "done":
        sys.exit(0)
    if word.startswith("+"):
        groups.add(int(word[1:]))
    elif word.startswith("-"):
        groups.discard(int(word[1:]))
# End of input without "done": the owner died without stopping its groups.
for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
    for group in groups:
        try:
            os.killpg(group, sig)
        except OSError:
            pass
    time.sleep(pause)
"""


_SIGNAL_NUMBERS = frozenset(int(s) for s in signal.Signals)


def _signal_name(number: int) -> str:
    """``SIGKILL (9)`` for 9; the number alone for one this platform does not name."""
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def _command(pid: int) -> str:
    """The program name of ``pid`` (``java``, ``emulator_main``), or ``?`` once it is gone."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return "?"
    return Path(argv0.decode(errors="replace")).name or "?"


class GroupReaper:
    """A watchdog process that stops the registered process groups if their owner dies.

    The stack's atexit and SIGTERM handlers cannot run when the owning process is killed
    with SIGKILL or leaves through ``os._exit``; its emulators, leaders of their own sessions,
    would then run on. The reaper reads registrations from a pipe whose write end only the
    owner holds: when the pipe ends without the owner's "done", the kernel has closed it
    because the owner is gone, and the reaper sends SIGTERM, then SIGKILL, to every group
    still registered.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        read_end, write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _REAPER_CODE],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        self._pipe: Any = os.fdopen(write_end, "w", buffering=1)

    def _send(self, line: str) -> None:
        with self._lock:
            if self._pipe is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._pipe.write(line + "\n")

    def watch(self, pgid: int) -> None:
        """Stop this group should the owner die."""
        self._send(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        """The group was stopped by its owner."""
        self._send(f"-{pgid}")

    def close(self) -> None:
        """The owner stopped everything itself: the reaper exits without killing."""
        self._send("done")
        with self._lock:
            pipe, self._pipe = self._pipe, None
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)


class ManagedProcess:
    """One emulator process, leader of its own process group, logging to a file.

    Attributes:
        name: The service name, used in messages.
        argv: The command line it was started with.
        log_path: The file that receives its stdout and stderr.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Starts the process in a new session.

        Raises:
            EmulatorError: The executable could not be started at all.
        """
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            try:
                self.popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(env) if env is not None else None,
                    cwd=str(cwd) if cwd is not None else None,
                    start_new_session=True,
                )
            except OSError as err:
                raise EmulatorError(f"{name}: cannot run {self.argv[0]!r}: {err}") from err
        # With start_new_session the child is the leader: its pgid is its pid.
        self.pgid = self.popen.pid
        #: The group's other members once it was ready (``pid -> command``): the real server
        #: when the direct child is a wrapper such as ``gcloud``.
        self.servers: dict[int, str] = {}

    @property
    def pid(self) -> int:
        """The pid of the direct child (also the process group id)."""
        return self.popen.pid

    def exited(self) -> int | None:
        """Returns the direct child's exit code, or None while it runs."""
        return self.popen.poll()

    def note_servers(self) -> None:
        """Remembers the group's members besides the direct child, once it is ready.

        ``gcloud`` exits with code 0 when the emulator it started is killed, so how the real
        server ended can only be told by knowing which process it was.
        """
        self.servers = {
            pid: _command(pid) for pid in group_members(self.pgid) if pid != self.popen.pid
        }

    def describe_exit(self) -> str | None:
        """How the process ended, in words for a message; None while it runs.

        A signal death reads "was killed by signal SIGKILL (9)"; a wrapper that exited 0 after
        its server ended names the server, since the wrapper hides how the server ended.
        """
        code = self.popen.poll()
        if code is None:
            return None
        if code < 0:
            return f"was killed by signal {_signal_name(-code)}"
        if code == 0 and self.servers:
            servers = ", ".join(f"{cmd} (pid {pid})" for pid, cmd in self.servers.items())
            return (
                f"stopped: its server {servers} ended and its wrapper {Path(self.argv[0]).name} "
                "exited with code 0, which it also does when the server is killed by a signal"
            )
        if code > 128 and code - 128 in _SIGNAL_NUMBERS:
            return (
                f"exited with code {code} (a shell's report of signal {_signal_name(code - 128)})"
            )
        return f"exited with code {code}"

    def alive(self) -> bool:
        """Tells whether any process of the group is still running."""
        return bool(group_members(self.pgid))

    def log_tail(self, lines: int = 40) -> str:
        """Returns the last lines of the log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, grace: float = 4.0) -> None:
        """Stops the whole process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        Waiting for the group to empty (not just the direct child) matters because a
        JVM started by ``gcloud`` may outlive the wrapper and keep its port bound.
        """
        if not self.alive() and self.exited() is not None:
            return
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.exited()  # reaps the direct child as soon as it exits
            if not self.alive():
                break
            time.sleep(0.05)
        else:
            self._signal_group(signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and self.alive():
                self.exited()
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1.0)


def wait_until(
    probe: Callable[[], object],
    *,
    timeout: float,
    what: str,
    process: ManagedProcess | None = None,
    interval: float = 0.1,
) -> Any:
    """Calls ``probe`` until it returns a truthy value without raising.

    Fails fast when the watched process dies instead of waiting out the timeout, and
    puts the tail of its log in the error, since that is where the reason is.

    Returns:
        The probe's first truthy result.

    Raises:
        EmulatorStartError: The timeout passed or the process exited first.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except Exception as err:  # noqa: BLE001 - any failure means "not ready yet"
            last_error = err
        if process is not None and process.exited() is not None:
            raise EmulatorStartError(
                f"{what}: the process {process.describe_exit()} before it was "
                f"ready. Log {process.log_path}:\n{process.log_tail()}"
            )
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            tail = f" Log {process.log_path}:\n{process.log_tail()}" if process is not None else ""
            raise EmulatorStartError(f"{what}: not ready after {timeout:g} s{detail}.{tail}")
        time.sleep(interval)


def grpc_ready(port: int, method: str, parent: str) -> Callable[[], bool]:
    """A readiness probe: the port accepts connections and a unary call of ``method`` on
    ``parent`` is answered."""
    target = f"{LOOPBACK}:{port}"

    def probe() -> bool:
        if not tcp_open(LOOPBACK, port):
            return False
        grpc_unary_probe(target, method, parent)
        return True

    return probe


def http_ready(url: str, *ports: int) -> Callable[[], bool]:
    """A readiness probe: every port accepts connections and ``GET url`` answers 200."""

    def probe() -> bool:
        if not all(tcp_open(LOOPBACK, p) for p in ports):
            return False
        status, _ = http_json("GET", url, timeout=2.0)
        return status == 200

    return probe


class Stopped(Exception):
    """Raised from a signal handler to leave a foreground wait (``emulators up``,
    ``cluster up``) and stop what it started."""


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """Turn SIGINT, SIGTERM and SIGHUP into :class:`Stopped` in the main thread.

    SIGINT is taken explicitly because a shell starts background jobs with it ignored, and
    ``kill -INT`` must still stop the command; SIGHUP is left alone when ignored (nohup).
    """
    signal.signal(signal.SIGINT, _raise_stopped)
    signal.signal(signal.SIGTERM, _raise_stopped)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_stopped)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (ended, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust the signal
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")
