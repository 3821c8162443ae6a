"""Keeps a local job's Java gateway from stalling on its own error output.

PyFlink 2.3 starts the Java gateway of a client process (which hosts the MiniCluster of a
local job) with its standard error as a pipe, so that it can show that output if the gateway
dies while starting, and reads the pipe only then. Once the JVM has written about 64 KB to
``System.err`` over the life of the process, the pipe is full and every later write to it
blocks forever: Beam's gRPC console log lines, and in thread mode the embedded Python
interpreter's ``sys.stderr`` (warnings included), which PemJa sends to ``System.err``. A task
thread writing one then stops, holding what it holds; a thread-mode operator blocked while
importing holds Python's import locks, so the other subtasks stop in their ``open()`` too and
the job never ends. A process that runs many jobs, or one long job, reaches that sooner or later.

:func:`drain_gateway_stderr` reads the pipe on a daemon thread for the life of the gateway and
passes the output on, so nothing in the JVM waits on it. It must run before the gateway starts
(the first ``StreamExecutionEnvironment`` or ``TableEnvironment`` of the process): PyFlink
keeps no handle to the pipe once it has started.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import IO, Any

_LOG = logging.getLogger("pyflink_gcp.gateway")

#: Bytes written to a file target at most; the rest is read and dropped (and counted), so a
#: JVM that writes without end cannot fill the disk.
MAX_FILE_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024

_installed = False
_install_lock = threading.Lock()
#: Drain threads started in this process (one per gateway launched).
drains: list[GatewayStderrDrain] = []


class GatewayStderrDrain(threading.Thread):
    """Reads one gateway's standard error until it closes and writes it to ``sink``.

    Attributes:
        process: The gateway's ``Popen`` (None when not given).
        bytes_read: Everything read from the pipe.
        bytes_dropped: What a file target did not take beyond :data:`MAX_FILE_BYTES`.
    """

    def __init__(
        self,
        pipe: IO[bytes],
        sink: Callable[[bytes], Any],
        limit: int | None,
        process: Any = None,
    ) -> None:
        super().__init__(name="pyflink-gateway-stderr", daemon=True)
        self.process = process
        self._fd = pipe.fileno()
        self._pipe = pipe  # kept open (and referenced) while the thread reads its descriptor
        self._sink = sink
        self._limit = limit
        self.bytes_read = 0
        self.bytes_dropped = 0

    def run(self) -> None:
        written = 0
        while True:
            try:
                chunk = os.read(self._fd, _CHUNK)
            except OSError:
                return
            if not chunk:
                return
            self.bytes_read += len(chunk)
            if self._limit is not None and written + len(chunk) > self._limit:
                self.bytes_dropped += len(chunk)
                continue
            written += len(chunk)
            try:
                self._sink(chunk)
            except Exception:  # noqa: BLE001 - keep draining: the JVM must never wait on us
                self.bytes_dropped += len(chunk)


def _file_sink(path: str) -> Callable[[bytes], Any]:
    out = open(path, "ab", buffering=0)  # noqa: SIM115 - open for the life of the drain

    return out.write


def _fd2_sink(chunk: bytes) -> None:
    # File descriptor 2 rather than sys.stderr: PyFlink's workers replace sys.stderr, and the
    # bytes are the JVM's, not text of this interpreter.
    os.write(2, chunk)


def drain_gateway_stderr(to: str | None = None) -> None:
    """Read the standard error of the Java gateway this process starts, for as long as it runs.

    Call it once, before the first environment is created; later calls do nothing. The output
    goes to this process's file descriptor 2 (the console, as the JVM's own output would), or
    appended to the file ``to`` (at most :data:`MAX_FILE_BYTES`; the rest is dropped).

    Raises:
        RuntimeError: The gateway already runs, so its pipe can no longer be reached.
    """
    global _installed
    from pyflink import java_gateway

    with _install_lock:
        if _installed:
            return
        if getattr(java_gateway, "_gateway", None) is not None:
            raise RuntimeError(
                "drain_gateway_stderr() must be called before the first StreamExecutionEnvironment "
                "or TableEnvironment: PyFlink's Java gateway already runs"
            )
        sink, limit = (_fd2_sink, None) if to is None else (_file_sink(to), MAX_FILE_BYTES)
        start_process = java_gateway.launch_gateway_server_process
        launch = java_gateway.launch_gateway
        started: list[Any] = []

        def start_process_kept(*args: Any, **kwargs: Any) -> Any:
            process = start_process(*args, **kwargs)
            started.append(process)
            return process

        def launch_and_drain(*args: Any, **kwargs: Any) -> Any:
            # PyFlink reads the pipe itself when the gateway dies while starting (its error
            # message shows that output), so the drain starts once the gateway is up.
            try:
                return launch(*args, **kwargs)
            finally:
                for process in started:
                    if process.poll() is None and process.stderr is not None:
                        drain = GatewayStderrDrain(process.stderr, sink, limit, process)
                        drain.start()
                        drains.append(drain)
                        _LOG.debug("draining the standard error of gateway pid %s", process.pid)
                started.clear()

        java_gateway.launch_gateway_server_process = start_process_kept
        java_gateway.launch_gateway = launch_and_drain
        _installed = True


def ended_gateways() -> list[str]:
    """How each gateway this process started and drained has ended, if it has.

    A gateway that ends while the process still uses it turns every later PyFlink call into
    "... does not exist in the JVM"; its exit status (a signal, or the JVM's own exit code)
    is the one clue to why, and only this process can read it.

    Returns:
        One line per ended gateway, e.g. ``"pid 4242 ended: signal SIGTERM (15)"``.
    """
    ended = []
    for drain in drains:
        process = drain.process
        code = None if process is None else process.poll()
        if code is None:
            continue
        how = f"signal {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        ended.append(f"pid {process.pid} ended: {how}")
    return ended


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)
