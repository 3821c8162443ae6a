"""The null backend for the benchmarks: build it, start it, point the sinks at it, read its counts.

The null backend (``bench/nullbackend/``, Go) speaks the write path of all five services on one
gRPC port, plus the BigQuery REST table lookups on one HTTP port, answers after a configurable
latency and counts records per destination. A benchmark against it measures the sink rather
than an emulator that shares the job's cores (see bench/README.md).

It is built the way the Cloud Tasks emulator is: from source, with the Go toolchain, its
dependencies from the Go module proxy, into the tools cache (``$PYFLINK_GCP_CACHE`` or
``~/.cache/pyflink-gcp``), once per change of its sources or of Go, behind a stamp file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyflink_gcp.tools.emulators.tools import cache_root

SOURCE = Path(__file__).resolve().parent / "nullbackend"

#: The variables each sink's client honours, pointed at the gRPC port (all but one) or the
#: HTTP port (BigQuery's REST table lookups).
GRPC_VARIABLES = (
    "PUBSUB_EMULATOR_HOST",
    "BIGQUERY_STORAGE_EMULATOR_HOST",
    "BIGTABLE_EMULATOR_HOST",
    "CLOUD_TASKS_EMULATOR_HOST",
    "SPANNER_EMULATOR_HOST",
)
HTTP_VARIABLES = ("BIGQUERY_EMULATOR_HOST",)


def _digest() -> str:
    """What the binary is built from: every source file, and the Go toolchain's version (a new
    Go rebuilds it)."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            "the null backend is built from source with Go, and `go` is not on PATH: install "
            "Go (https://go.dev/dl/)"
        )
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    h = hashlib.sha256(version.encode())
    for path in sorted(SOURCE.iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build() -> Path:
    """Builds the null backend into the tools cache unless the stamp says it is current.

    Idempotent, and serialised with the emulator tools' setup by the cache's lock file; a warm
    call hashes a few files. The first build downloads grpc and protobuf from the Go module
    proxy (``go.sum`` pins them) and takes about 30 s.
    """
    cache = cache_root()
    binary = cache / "bin" / "nullbackend"
    stamp = cache / "nullbackend.stamp"
    expected = _digest()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if binary.exists() and stamp.exists() and stamp.read_text() == expected:
                return binary
            stamp.unlink(missing_ok=True)
            binary.parent.mkdir(parents=True, exist_ok=True)
            partial = binary.with_name("nullbackend.partial")
            # -mod=readonly: go.mod and go.sum in the tree are the truth; -trimpath: the binary
            # does not depend on where the tree is.
            env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
            done = subprocess.run(
                ["go", "build", "-trimpath", "-o", str(partial), "."],
                cwd=SOURCE,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"building the null backend failed:\n{done.stderr[-3000:]}")
            partial.replace(binary)
            stamp.write_text(expected)
            return binary
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class NullBackend:
    """A running null backend on free loopback ports (both chosen by the server itself, so no
    other process can take them between a probe and the bind).

    Use as a context manager; :meth:`stop` ends its process group.

    Attributes:
        grpc_port: The port of every service's gRPC calls.
        http_port: BigQuery's REST calls and the control endpoints.
    """

    def __init__(self, latency_ms: float = 0.0, *, log_calls: bool = False) -> None:
        self.latency_ms = latency_ms
        self.log_calls = log_calls
        self.grpc_port = 0
        self.http_port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> NullBackend:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> NullBackend:
        """Build if needed, start, and wait until the HTTP port answers."""
        binary = build()
        argv = [str(binary), "-latency", f"{self.latency_ms}ms"]
        if self.log_calls:
            argv.append("-log-calls")
        # A process group of its own: stop() ends it and anything it started, and a Ctrl-C
        # in the terminal reaches the benchmark first, which then stops it.
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        line = self._process.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise RuntimeError("the null backend did not report its ports")
        ports = json.loads(line)
        self.grpc_port, self.http_port = int(ports["grpc"]), int(ports["http"])
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._request("GET", "/_healthz")
                return self
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError("the null backend does not answer") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """End the process group: SIGTERM, then SIGKILL after 5 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @property
    def pid(self) -> int:
        assert self._process is not None, "start() first"
        return self._process.pid

    @property
    def env(self) -> dict[str, str]:
        """The emulator variables pointing every sink's clients at this backend."""
        grpc_host = f"127.0.0.1:{self.grpc_port}"
        http_host = f"127.0.0.1:{self.http_port}"
        return {
            **dict.fromkeys(GRPC_VARIABLES, grpc_host),
            **dict.fromkeys(HTTP_VARIABLES, http_host),
        }

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}{path}", data=data, method=method
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def counts(self) -> dict[str, Any]:
        """What the backend counted since the last reset: ``records`` and ``refused`` (by
        service, then destination), ``calls``, ``failed_calls`` and ``unimplemented`` (by gRPC
        method or REST call), ``streams``, ``open_streams``, ``connections``, and ``quota``
        (the quota-error rule's window and injections, :meth:`inject_quota_errors`)."""
        result: dict[str, Any] = self._request("GET", "/_counts")
        return result

    def reset(self) -> None:
        """Zero the counts (open streams and connections stay)."""
        self._request("DELETE", "/_counts")

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change the configuration between jobs: ``latency_ms``, ``reject_marker`` (records
        containing it are refused), ``fail`` (a list of ``{"method", "nth", "times", "code"}``:
        the nth call of the method and the times-1 after it fail with that status; replaces
        the rules and restarts their counting), ``quota_errors`` (see
        :meth:`inject_quota_errors`; None removes it), ``bigquery_schema`` (the REST fields of
        every table), ``spanner`` (``{"tables", "columns": [{"name", "type"}], "key"}``)."""
        result: dict[str, Any] = self._request("PUT", "/_config", settings)
        return result

    def inject_quota_errors(
        self,
        rate: float,
        duration_s: float,
        *,
        retry_delay_ms: float = 0.0,
        per_entry: bool = False,
        methods: list[str] | None = None,
    ) -> dict[str, Any]:
        """Answer ``rate`` of the write calls with RESOURCE_EXHAUSTED for ``duration_s``,
        counted from the next write call (so a job's start does not use the window up).

        The share is exact and spread evenly over each method's calls, from its first call in
        the window (with 0.3 the 1st, 5th, 8th, 11th... call fails), so a sink that makes few
        calls, or starts writing late in the window, still meets its errors.

        The write calls are Publish, each AppendRows request (the status in its response),
        MutateRows (whole, or with ``per_entry`` each entry at the rate), CreateTask and
        Commit; ``methods`` (suffixes of method names) narrows them. ``retry_delay_ms`` adds a
        ``google.rpc.RetryInfo`` asking for that delay. ``counts()["quota"]`` reports the
        window (``pending``, ``active``, ``over``), the errors ``injected`` per method and the
        ``calls_after_window``.
        """
        rule: dict[str, Any] = {
            "rate": rate,
            "duration_s": duration_s,
            "retry_delay_ms": retry_delay_ms,
            "per_entry": per_entry,
        }
        if methods:
            rule["methods"] = methods
        return self.configure(quota_errors=rule)


@contextlib.contextmanager
def running(latency_ms: float = 0.0, *, log_calls: bool = False) -> Iterator[NullBackend]:
    """A started backend whose variables are in ``os.environ`` while the block runs (set before
    the first Flink job, so the MiniCluster's Python workers inherit them)."""
    with NullBackend(latency_ms, log_calls=log_calls) as backend:
        saved = {k: os.environ.get(k) for k in backend.env}
        os.environ.update(backend.env)
        try:
            yield backend
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


if __name__ == "__main__":
    # `python bench/_nullbackend.py`: build (or find) the binary and print where it is.
    print(build())
