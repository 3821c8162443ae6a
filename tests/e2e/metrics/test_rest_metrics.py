"""The sink's metrics read back through Flink's REST API from a running Pub/Sub job.

The job runs on a MiniCluster with ``rest.port`` set, writes 300 records to two topics with
``per_destination_metrics`` on and ``log_and_drop``, six of them empty messages the emulator
rejects (INVALID_ARGUMENT), then keeps running on records its serializer skips, so the metrics
are read from a live job. The names asserted are the ones ``docs/metrics.md`` documents, and the
dropped records' log lines are read from the console (the job's workers are threads of this
process, so the sink's console handler writes to this process's standard error).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from pyflink_gcp.core import FailureHandler
from pyflink_gcp.core.metrics import metric_identifier
from pyflink_gcp.pubsub import PubSubSink, PubSubWriterOptions, TopicDestination
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, unique

pytestmark = pytest.mark.e2e

T = TypeVar("T")

WRITTEN = 300
EMPTY = {7, 57, 107, 157, 207, 257}  # odd: all go to topic "b"
WAIT_S = 90.0
#: Records of one Python bundle, the writer's and the map's before it. Metrics reach Flink at
#: bundle ends, and a bundle ends only when the worker has processed every record PyFlink sent
#: ahead for it: at the defaults, a bundle of the paced records after the counted ones could
#: last minutes.
BUNDLE = 50


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rest_conf(port: int) -> dict[str, str]:
    """The configuration of a job whose metrics are read through the REST API at ``port``.

    The REST server answers from a cache of the TaskManagers' metrics that it refreshes every
    ``metrics.fetcher.update-interval`` (10 s by default): refreshed every half second, a poll
    sees a value soon after it reached Flink. The Python map before the writer (where
    :class:`SlowAfter` paces the records) ends its bundles every :data:`BUNDLE` records, so a
    checkpoint barrier waits for a second of paced records at most, not for the 100,000 a
    default bundle holds.
    """
    return {
        "rest.port": str(port),
        "metrics.fetcher.update-interval": "500 ms",
        "python.fn-execution.bundle.size": str(BUNDLE),
    }


class SlowAfter:
    """The record map of a metrics job: ``i`` itself, each from ``after`` on 20 ms late.

    The job lives on, cheaply, past the records that count, so the metrics are read from a live
    job. The pace is set upstream of the writer rather than in its serializer: a slow writer
    would fill the channel before it with thousands of records, which a checkpoint barrier
    then waits behind (and the writer's flush at the checkpoint with it, which counts the
    records the service rejected).
    """

    def __init__(self, after: int) -> None:
        self.after = after

    def __call__(self, i: int) -> int:
        if i >= self.after:
            time.sleep(0.02)
        return i


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read())


class Resolver:
    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def __call__(self, i: int, ctx) -> TopicDestination:
        return TopicDestination.of(self.project, f"{self.prefix}-{'ab'[i % 2]}")


def serialize(i: int, ctx) -> bytes | None:
    if i >= WRITTEN:
        return None
    return b"" if i in EMPTY else str(i).encode()


def writer_metrics(port: int, job_id: str) -> tuple[list[str], dict[str, float]]:
    """The writer vertex's sink metrics: their full REST ids, and values by name from
    ``pyflink_gcp.`` on (the ids start with the subtask index and the operator's name)."""
    for vertex in get(port, f"/jobs/{job_id}")["vertices"]:
        base = f"/jobs/{job_id}/vertices/{vertex['id']}/metrics"
        ids = [
            m["id"]
            for m in get(port, base)
            if ".pyflink_gcp." in m["id"] and "Committer.pyflink_gcp." not in m["id"]
        ]
        if ids:
            values = get(port, f"{base}?get={','.join(ids)}")
            named = {m["id"][m["id"].index("pyflink_gcp.") :]: float(m["value"]) for m in values}
            return ids, named
    return [], {}


def committer_metrics(port: int, job_id: str) -> dict[str, float]:
    """The committer operator's ``pyflink_gcp`` gauges by name (an exactly-once sink's second
    operator, ``<sink>: Committer``), wherever Flink chained it."""
    for vertex in get(port, f"/jobs/{job_id}")["vertices"]:
        base = f"/jobs/{job_id}/vertices/{vertex['id']}/metrics"
        ids = [m["id"] for m in get(port, base) if "Committer.pyflink_gcp." in m["id"]]
        if ids:
            values = get(port, f"{base}?get={','.join(ids)}")
            return {m["id"][m["id"].index("pyflink_gcp.") :]: float(m["value"]) for m in values}
    return {}


def poll(read: Callable[[], T], ready: Callable[[T], bool], wait_s: float = WAIT_S) -> T:
    """``read()`` every quarter second until ``ready`` holds for what it read, or the last read
    at the deadline (the caller's assertions then say what was missing). A read the REST server
    does not answer yet (the job starting) is retried."""
    got: T | None = None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            got = read()
        except OSError:
            continue
        if ready(got):
            break
    if got is None:
        got = read()
    return got


def poll_writer_metrics(
    port: int, job_id: str, ready: Callable[[dict[str, float]], bool], wait_s: float = WAIT_S
) -> tuple[list[str], dict[str, float]]:
    """The writer's metrics (:func:`writer_metrics`) once ``ready`` holds for them."""
    return poll(lambda: writer_metrics(port, job_id), lambda read: ready(read[1]), wait_s)


def per_destination(got: dict[str, float], counter: str) -> dict[str, float]:
    """``pyflink_gcp.destination.<id>.<counter>`` values by ``<id>``."""
    head, tail = "pyflink_gcp.destination.", f".{counter}"
    return {
        k[len(head) : -len(tail)]: v
        for k, v in got.items()
        if k.startswith(head) and k.endswith(tail)
    }


def test_sink_metrics_have_their_documented_names_and_counts(
    project: str, capfd: pytest.CaptureFixture[str]
) -> None:
    prefix = unique("metrics")
    make_topics(project, [f"{prefix}-a", f"{prefix}-b"])
    port = free_port()
    env = make_env(parallelism=1, checkpoint_ms=500, extra=rest_conf(port))
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(Resolver(project, prefix))
        .set_serializer(serialize)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(
            PubSubWriterOptions.builder()
            .per_destination_metrics(True)
            .max_buffered_records(BUNDLE)
            .build()
        )
        .build()
    )
    record_stream(env, 1_000_000, SlowAfter(WRITTEN)).sink_to(sink)
    client = env.execute_async("sink metrics")
    job_id = str(client.get_job_id())
    try:
        # Every counted record is in, and the skipped ones after them have begun.
        ids, got = poll_writer_metrics(
            port,
            job_id,
            lambda got: (
                got.get("pyflink_gcp.recordsWritten", 0) >= WRITTEN
                and got.get("pyflink_gcp.recordsDropped", 0) >= len(EMPTY)
                and got.get("pyflink_gcp.recordsSkipped", 0) > 0
                and sum(per_destination(got, "errors").values()) >= len(EMPTY)
            ),
        )
    finally:
        client.cancel().result()
    assert ids and all(i.startswith("0.") for i in ids), ids
    assert got["pyflink_gcp.recordsWritten"] == WRITTEN, got
    assert got["pyflink_gcp.recordsDropped"] == len(EMPTY), got
    assert got["pyflink_gcp.recordsDeadLettered"] == 0, got
    assert got["pyflink_gcp.recordsSkipped"] > 0, got
    assert got["pyflink_gcp.activeWriters"] == 2, got
    assert {
        "pyflink_gcp.lastFlushMillis",
        "pyflink_gcp.maxFlushMillis",
        "pyflink_gcp.checkpointMarkers",
    } <= set(got), got
    assert got["pyflink_gcp.maxFlushMillis"] >= got["pyflink_gcp.lastFlushMillis"], got
    assert sorted(per_destination(got, "records").values()) == [WRITTEN / 2, WRITTEN / 2], got
    errors = per_destination(got, "errors")
    assert sum(errors.values()) == max(errors.values()) == len(EMPTY), got
    assert all(v > 0 for v in per_destination(got, "bytes").values()), got
    ids_ab = {metric_identifier(f"projects/{project}/topics/{prefix}-{t}") for t in "ab"}
    assert set(per_destination(got, "records")) == ids_ab, got
    # log_and_drop's lines reach the console of a local job (its file descriptor 2), one per
    # record below the per-flush limit.
    err = capfd.readouterr().err
    dropped = f"dropped: sink 'pubsub-sink': destination 'projects/{project}/topics/{prefix}-b'"
    assert err.count(dropped) == len(EMPTY), err[-3000:]
    assert "INVALID_ARGUMENT" in err
