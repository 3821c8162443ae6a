"""Endpoints that cannot serve: one that refuses connections, one that never answers.

A sink must fail within its retry deadline when its service cannot be reached. The two ways a
service is unreachable fail differently on the client: a refused connection fails each attempt
at once (a gRPC channel reports UNAVAILABLE, a REST client a connection error), while a peer
that accepts the connection and stays silent fails each attempt only at its timeout (gRPC waits
for the HTTP/2 handshake, a REST client for the response).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def refusing_endpoint() -> str:
    """``127.0.0.1:<port>`` of a free port with nothing listening: connections are refused.

    The port was free when this returned; nothing on this machine binds ports in a range
    tests use, so it stays refused for the few seconds a test needs it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@contextmanager
def black_hole_endpoint() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte.

    Yields its ``127.0.0.1:<port>``. What clients send is read and discarded, so they never
    block on a full socket buffer; connections are closed when the context ends.
    """
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    stop = threading.Event()
    connections: list[socket.socket] = []

    def drain(conn: socket.socket) -> None:
        conn.settimeout(0.2)
        while not stop.is_set():
            try:
                if not conn.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connections.append(conn)
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, name="black-hole-endpoint", daemon=True)
    acceptor.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join(timeout=2)
        server.close()
        for conn in connections:
            conn.close()
