"""An HTTP endpoint that records every request, standing in for a Cloud Tasks target.

The Cloud Tasks emulator dispatches HTTP tasks for real, so tests need a server to
receive them and a way to look at what arrived. The receiver runs in a thread of the
process that owns the stack; another process (a PyFlink job, a second terminal) can
read what it got from ``GET /_received``.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pyflink_gcp.tools.emulators.processes import LOOPBACK

__all__ = ["INSPECT_PATH", "Receiver", "ReceivedCursor", "fetch_received"]

# Reserved path: GET answers the recorded requests as JSON, DELETE clears them. Requests
# to it are not recorded. GET takes ``since`` (answer only the requests recorded from that
# index on) and ``path_prefix`` (only those whose path starts with it); the
# ``X-Received-Next`` header of the answer is the index to ask ``since`` next time.
INSPECT_PATH = "/_received"
NEXT_HEADER = "X-Received-Next"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        body = self._read_body()
        receiver = self.server.receiver
        path, _, query = self.path.partition("?")
        if path == INSPECT_PATH and self.command == "GET":
            params = urllib.parse.parse_qs(query)
            since = int(params.get("since", ["0"])[0])
            prefix = params.get("path_prefix", [""])[0]
            received = receiver.received()
            payload = json.dumps(
                [
                    {**entry, "body": base64.b64encode(entry["body"]).decode("ascii")}
                    for entry in received[since:]
                    if entry["path"].startswith(prefix)
                ]
            ).encode()
            self._reply(200, payload, "application/json", {NEXT_HEADER: str(len(received))})
            return
        if path == INSPECT_PATH and self.command == "DELETE":
            receiver.clear_received()
            self._reply(200, b"", "text/plain")
            return
        receiver._record(
            {
                "method": self.command,
                "path": self.path,
                "headers": {key.lower(): value for key, value in self.headers.items()},
                "body": body,
            }
        )
        self._reply(receiver.response_status, b"", "text/plain")

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Skip optional trailers up to the empty line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(
        self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Silences the per-request stderr line; the records are the log."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The Cloud Tasks emulator dispatches hundreds of tasks at once; the default backlog of 5
    # leaves connections hanging until its dispatch deadline.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], receiver: Receiver) -> None:
        self.receiver = receiver
        super().__init__(address, _Handler)


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that answers every request and records it.

    Attributes:
        response_status: The status answered to recorded requests (200 by default);
            set it to an error status to exercise a client's retries.
    """

    def __init__(self, host: str = LOOPBACK, port: int = 0) -> None:
        """Binds the server (port 0 picks a free port); :meth:`start` serves it."""
        self._host = host
        self._lock = threading.Lock()
        self._received: list[dict[str, Any]] = []
        self.response_status = 200
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT``."""
        port = self._server.server_address[1]
        return f"http://{self._host}:{port}"

    def start(self) -> Receiver:
        """Serves requests from a daemon thread of this process."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name="pyflink-gcp-receiver",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._received.append(entry)

    def received(self) -> list[dict[str, Any]]:
        """Returns a copy of the requests so far, oldest first.

        Each is a dict with ``method``, ``path`` (with its query string), ``headers``
        (lower-case keys) and ``body`` (bytes).
        """
        with self._lock:
            return list(self._received)

    def clear_received(self) -> None:
        """Forgets the requests recorded so far."""
        with self._lock:
            self._received.clear()


def fetch_received(
    url: str, timeout: float = 5.0, *, path_prefix: str = ""
) -> list[dict[str, Any]]:
    """Reads what a receiver got from another process, bodies decoded back to bytes.

    Args:
        url: The receiver's base URL (``PYFLINK_GCP_RECEIVER_URL``).
        timeout: Seconds to wait for the answer.
        path_prefix: Only the requests whose path (with its query string) starts with it.
    """
    return ReceivedCursor(url, path_prefix=path_prefix, timeout=timeout).fetch_new()


class ReceivedCursor:
    """Reads a receiver's requests in installments: each :meth:`fetch_new` answers only what
    arrived since the previous one, so polling a receiver that holds a hundred thousand calls
    moves only the new ones (reading them all on every poll took longer than its timeout)."""

    def __init__(self, url: str, *, path_prefix: str = "", timeout: float = 30.0) -> None:
        self._url = url.rstrip("/") + INSPECT_PATH
        self._prefix = path_prefix
        self._timeout = timeout
        self._since = 0

    def fetch_new(self) -> list[dict[str, Any]]:
        """The requests (under the prefix) recorded since the last call, oldest first."""
        query = urllib.parse.urlencode({"since": self._since, "path_prefix": self._prefix})
        with urllib.request.urlopen(f"{self._url}?{query}", timeout=self._timeout) as response:
            entries = json.loads(response.read())
            self._since = int(response.headers.get(NEXT_HEADER, self._since))
        for entry in entries:
            entry["body"] = base64.b64decode(entry["body"])
        return entries
