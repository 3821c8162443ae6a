"""A TCP proxy that counts the bytes its clients send: what a request costs on the wire.

gRPC compresses a request's message before it leaves the process, so the only place a test can
see that a request was compressed is between the client and the server. The proxy forwards
every connection to the target unchanged, counting the client-to-server bytes before it
forwards them: once a call was answered, every byte of its request is counted.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class CountingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (``host:port``), counting upstream bytes.

    Use as a context manager; :attr:`address` is what clients connect to and :attr:`sent` the
    bytes all clients sent so far.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self._server.settimeout(0.2)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sent = 0
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="counting-proxy", daemon=True)

    @property
    def sent(self) -> int:
        """Bytes clients sent through the proxy so far."""
        with self._lock:
            return self._sent

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._server.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            self._sockets += [client, upstream]
            for src, dst, counted in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pipe,
                    args=(src, dst, counted),
                    name="counting-proxy-pipe",
                    daemon=True,
                ).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                if counted:
                    with self._lock:
                        self._sent += len(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
