"""Shared benchmark plumbing: MiniCluster jobs with real worker processes, timing, tables."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import DataStream, KeyedStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction

from pyflink_gcp.core.gateway import drain_gateway_stderr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A benchmark runs many jobs on one gateway, whose standard error PyFlink leaves in a pipe that
#: stalls the JVM once full; drained into this file instead of the console, which would get
#: Beam's stack traces of every worker shutdown between the results.
GATEWAY_STDERR = os.path.join(tempfile.gettempdir(), f"pyflink-gcp-bench-gateway-{os.getpid()}.log")
drain_gateway_stderr(GATEWAY_STDERR)


def flink_env(
    parallelism: int, checkpoint_ms: int | None = 2000, extra: dict[str, str] | None = None
) -> StreamExecutionEnvironment:
    """An environment whose Python workers are real processes (honest throughput)."""
    os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112
    paths = [ROOT, sysconfig.get_paths()["purelib"], os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    conf = Configuration()
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    for key, value in (extra or {}).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    return env


def source(
    env: StreamExecutionEnvironment, count: int, to_record: Callable[[int], Any]
) -> DataStream:
    ds = env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "n")
    return ds.map(to_record)


class NoOp(ProcessFunction):
    """The PyFlink ceiling: a Python process function that receives every record and emits none."""

    def process_element(self, value: Any, ctx: Any) -> None:
        return None


def run_job(env: StreamExecutionEnvironment, name: str) -> float:
    """Run and return the job's net runtime in seconds (excludes client and JVM startup)."""
    result = env.execute(name)
    return result.get_net_runtime() / 1000.0


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def table(rows: list[tuple[str, float]], baseline_names: dict[str, str]) -> str:
    """Rows of (name, records/s) plus ratios against the named baselines."""
    rates = dict(rows)
    out = [f"{'variant':<44}{'records/s':>12}"]
    for name, rate in rows:
        out.append(f"{name:<44}{rate:>12,.0f}")
    for label, (a, b) in ((k, v.split("/")) for k, v in baseline_names.items()):
        if a in rates and b in rates and rates[b] > 0:
            out.append(f"{label:<44}{rates[a] / rates[b]:>12.2f}")
    return "\n".join(out)


def log_span(path: str, start: float, end: float, **counts: Any) -> None:
    """Append one subtask's (first record, close) wall-clock span, and any counts or readings
    it kept (JSON values), to a JSON-lines file."""
    with open(path, "a") as f:
        f.write(json.dumps({"start": start, "end": end, **counts}) + "\n")


def new_spans(workdir: str, name: str) -> str:
    """A spans file of its own for one job run: a file reused by a repeated run would time both
    runs as one."""
    return os.path.join(workdir, f"{name}-{time.monotonic_ns()}.jsonl")


def span_total(path: str, key: str) -> int:
    """The sum of one count over all subtasks' latest spans (0 where a span has none).

    A subtask may log several lines (one per full flush, counts only growing); lines without a
    ``subtask`` each count as their own.
    """
    latest: dict[Any, dict[str, Any]] = {}
    with open(path) as f:
        for n, line in enumerate(f):
            span = json.loads(line)
            subtask = span.get("subtask", ("line", n))
            if subtask not in latest or span["end"] >= latest[subtask]["end"]:
                latest[subtask] = span
    return sum(span.get(key, 0) for span in latest.values())


def span_rate(path: str, records: int) -> float:
    """Records/s from the earliest start to the latest end over all subtasks' spans.

    Spans start at each subtask's first record, so worker start-up is excluded.
    """
    with open(path) as f:
        spans = [json.loads(line) for line in f]
    return records / (max(s["end"] for s in spans) - min(s["start"] for s in spans))


class _SpanTimer:
    """Receives every record, does nothing, logs its subtask's span at close."""

    def __init__(self, spans_path: str) -> None:
        self.spans_path = spans_path
        self.first: float | None = None

    def process_element(self, value: Any, ctx: Any) -> None:
        if self.first is None:
            self.first = time.time()

    def close(self) -> None:
        if self.first is not None:
            log_span(self.spans_path, self.first, time.time())


class SpanTimedNoOp(_SpanTimer, ProcessFunction):
    """The PyFlink ceiling timed by spans (a plain stream)."""


class SpanTimedKeyedNoOp(_SpanTimer, KeyedProcessFunction):
    """The PyFlink ceiling timed by spans, on a keyed stream."""


class SpanTimedFactory:
    """Mixin for a sink's writer factory: logs its subtask's span, from the first writer it
    creates (the first record) to its latest full flush, and again at close. Build one with
    :func:`timed_factory`.

    A span is logged at every full flush (``flush_shared`` ends one) because a Python worker may
    be torn down at the end of the job before its functions' ``close()`` ran (seen with 10,000
    destinations at 20 ms); :func:`span_rate` takes the latest end over all lines.
    """

    spans_path: str = ""
    _first: float | None = None
    _span_subtask = 0

    def create_writer(self, destination: Any) -> Any:
        if self._first is None:
            self._first = time.time()
        return super().create_writer(destination)  # type: ignore[misc]

    def open(self, info: Any) -> None:
        self._first = None
        self._span_subtask = info.subtask_index
        super().open(info)  # type: ignore[misc]

    def span_counts(self) -> dict[str, int]:
        """Counts to log with the span (a subclass names what its factory counted)."""
        return {}

    def flush_shared(self) -> Any:
        failed = super().flush_shared()  # type: ignore[misc]
        self._log_span_so_far()
        return failed

    def _log_span_so_far(self) -> None:
        if self._first is not None:
            counts = {"subtask": self._span_subtask, **self.span_counts()}
            log_span(self.spans_path, self._first, time.time(), **counts)

    def close(self) -> None:
        self._log_span_so_far()
        super().close()  # type: ignore[misc]


def timed_factory(cls: type[Any], factory: Any, spans_path: str) -> Any:
    """A copy of a built sink's (unopened) ``factory`` as ``cls``, a :class:`SpanTimedFactory`
    subclass of the factory's type, logging to ``spans_path``."""
    timed = cls.__new__(cls)
    state = factory.__getstate__()
    if hasattr(cls, "__setstate__"):
        timed.__setstate__(state)
    else:
        timed.__dict__.update(state)
    timed.spans_path = spans_path
    return timed


def shaped_env(
    shape: str,
    parallelism: int,
    fused_bundle_size: int,
    checkpoint_ms: int = 1_000,
    bundle_size: int | None = None,
    extra: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    """A benchmark job environment for a sink job shape.

    Fused (``set_chain_with_upstream()``), the record map runs inside the writer's operator,
    whose bundle settings are the writer's own; the job's bundle size is still raised to the
    sink's buffered-records default (``fused_bundle_size``) for the case where PyFlink fuses
    the writer into a map itself (then it flushes at that operator's bundle ends, and PyFlink's
    default of 1,000 would wait for the service every 1,000 records). ``bundle_size``, if given, is the job's bundle size in every shape (the
    upstream operators' too: the writer operator sets its own). ``extra``: more configuration.
    """
    from tests.support.jobs import make_env

    extra = dict(extra or {})
    if bundle_size is not None:
        extra["python.fn-execution.bundle.size"] = str(bundle_size)
    elif shape == "fused":
        extra["python.fn-execution.bundle.size"] = str(fused_bundle_size)
    return make_env(
        parallelism=parallelism, checkpoint_ms=checkpoint_ms, process_workers=True, extra=extra
    )


_warm = False


def warm_up(records: int = 30_000) -> None:
    """Run one throw-away no-op job (once per process) before anything is measured.

    The first Flink job of a client JVM runs at about half the speed of the later ones (class
    loading and JIT compilation): measured first, a ceiling would come out too low and flatter
    every ratio against it.
    """
    global _warm
    if _warm:
        return
    from tests.support.jobs import record_stream

    env = shaped_env("own chain", 2, 1_000)
    with tempfile.TemporaryDirectory() as workdir:
        noop_ceiling(
            env,
            record_stream(env, records, lambda i: {"i": i}),
            os.path.join(workdir, "warm-up.jsonl"),
            "own chain",
            records,
        )
    _warm = True


def noop_ceiling(
    env: StreamExecutionEnvironment, stream: DataStream, spans_path: str, shape: str, records: int
) -> float:
    """Records/s of a no-op Python operator on ``stream`` in a sink job shape.

    ``own chain``: the no-op starts its own operator chain, as the sink's writer does by
    default, so records cross from the map's Python worker through the JVM to the no-op's.
    ``fused``: PyFlink fuses it into the map. On a keyed stream the no-op is keyed too.
    """
    if isinstance(stream, KeyedStream):
        stream.process(SpanTimedKeyedNoOp(spans_path))
    else:
        out = stream.process(SpanTimedNoOp(spans_path))
        if shape == "own chain":
            out.start_new_chain()
    env.execute(f"bench-pyflink-ceiling-{shape}")
    return span_rate(spans_path, records)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_with_checkpoint_stats(env: StreamExecutionEnvironment, name: str, port: int) -> dict:
    """Run the job (its ``rest.port`` set to ``port``) and return Flink's checkpoint statistics
    as its REST API last showed them while it ran: ``completed`` and the average and maximum
    end-to-end checkpoint duration in ms; and, where a pyflink-gcp writer runs, its flushes as
    its ``lastFlushMillis`` gauge showed them (polled every 0.5 s, the largest over the
    subtasks): ``flush_ms``, the distinct readings seen (each a full flush's duration: at a
    checkpoint marker, or at the end of input); and ``flush_max_ms``, the largest its
    ``maxFlushMillis`` gauge showed, which keeps the flushes a poll misses (a flush at the end
    of input, after the last poll, is only in the samples, if at all)."""
    import json
    import threading
    import urllib.request

    client = env.execute_async(name)
    job_id = str(client.get_job_id())
    base = f"http://127.0.0.1:{port}/jobs/{job_id}"
    seen: dict = {"flush_ms": [], "flush_max_ms": 0.0}
    done = threading.Event()

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path, timeout=2) as response:
            return json.loads(response.read())

    gauges: list[str] = []  # "<vertex>/<metric id>" of the writers' lastFlushMillis
    maxima: list[str] = []  # the same of their maxFlushMillis

    def find_gauges() -> None:
        for vertex in get("")["vertices"]:
            path = f"/vertices/{vertex['id']}/subtasks/metrics"
            for metric in get(path):
                if metric["id"].endswith(".lastFlushMillis"):
                    gauges.append(f"{path}?get={metric['id']}")
                elif metric["id"].endswith(".maxFlushMillis"):
                    maxima.append(f"{path}?get={metric['id']}")

    def poll() -> None:
        last: float | None = None
        while not done.is_set():
            try:
                stats = get("/checkpoints")
                summary = stats["summary"]["end_to_end_duration"]
                seen.update(
                    completed=stats["counts"]["completed"],
                    avg_ms=float(summary["avg"]),
                    max_ms=float(summary["max"]),
                )
                if not gauges:
                    find_gauges()
                for gauge in gauges:
                    for value in get(gauge):
                        reading = float(value["max"])
                        if reading != last and reading > 0:
                            seen["flush_ms"].append(reading)
                            last = reading
                for gauge in maxima:
                    for value in get(gauge):
                        seen["flush_max_ms"] = max(seen["flush_max_ms"], float(value["max"]))
            except (OSError, KeyError, ValueError):
                pass
            done.wait(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        client.get_job_execution_result().result()
    finally:
        done.set()
        poller.join()
    return seen
