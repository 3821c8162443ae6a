"""Lineage of dynamic destinations in a real PyFlink job: records routed to several Pub/Sub topics
through the emulator, with a listener that writes what each subtask reports to a file.

Two sinks of one job write the same records to the same topics:

- ``lineage-all`` keeps at most two writers per subtask (``max_active_destinations=2``), so it
  opens writers for the same topics again and again; each subtask still reports each topic
  exactly once.
- ``lineage-bounded`` reports at most three datasets per subtask: each subtask reports three
  topics, says once that the bound was reached, and nothing more.

The records are read back from the emulator, so lineage changed nothing of what was written.

A third job fails over: once each subtask has reported every topic and a checkpoint taken after
that completed, a task raises; the restored subtasks report nothing again (the bridge's marker
operator kept what they had reported in its state), so each subtask still reports each topic
exactly once over both attempts.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyflink.datastream.functions import MapFunction

from pyflink_gcp import LineageDataset, LineageListener
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.pubsub import (
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from tests.support.jobs import SHORT_BUNDLES, make_env, record_stream, slow_number
from tests.support.pubsub import pull_all, topics_by_number
from tests.support.restore import Failover, checkpoint_completed, latest_checkpoint_started

pytestmark = pytest.mark.e2e

TOPICS = 6
COUNT = 600
PARALLELISM = 2
BOUND = 3
#: Loopback workers are threads of this process: the subtasks append to one file each.
_LOCK = threading.Lock()


class FileLineageListener(LineageListener):
    """Appends one JSON line per call to ``<directory>/<sink>-<subtask>.jsonl``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = ""

    def open(self, info: SubtaskInfo) -> None:
        self.path = os.path.join(self.directory, f"{info.sink_name}-{info.subtask_index}.jsonl")
        self._append({"event": "open", "attempt": info.attempt_number})

    def on_dataset(self, dataset: LineageDataset) -> None:
        self._append({"event": "dataset", **dataset.to_dict()})

    def on_limit_reached(self, limit: int) -> None:
        self._append({"event": "limit", "limit": limit})

    def _append(self, line: dict[str, Any]) -> None:
        with _LOCK, open(self.path, "a") as out:
            out.write(json.dumps(line) + "\n")


def _events(directory: Path, sink: str, subtask: int) -> list[dict[str, Any]]:
    path = directory / f"{sink}-{subtask}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_subtask_reports_each_topic_once_and_stops_at_the_bound(
    project: str, tmp_path: Path
) -> None:
    names, resolve = topics_by_number(project, "lineage", TOPICS)

    def sink(name: str, bound: int | None) -> PubSubSink:
        builder = (
            PubSubSink.builder()
            .set_sink_name(name)
            .set_destination_resolver(resolve)
            .set_serializer(PubSubSerializationSchema.payload(lambda r: str(r).encode()))
            .set_writer_options(PubSubWriterOptions.builder().max_active_destinations(2).build())
            .set_lineage_listener(FileLineageListener(str(tmp_path)))
        )
        return builder if bound is None else builder.set_max_lineage_datasets(bound)

    env = make_env(parallelism=PARALLELISM, checkpoint_ms=500, restarts=0)
    # Shuffled: every sink subtask gets records of every topic (each topic has 100, so missing
    # one is a chance of 2**-100), whichever source reader took the number splits: one may
    # take them all on a busy machine, and round robin would split the topics by parity.
    records = record_stream(env, COUNT, lambda i: i).shuffle()
    records.sink_to(sink("lineage-all", None).build())
    records.sink_to(sink("lineage-bounded", BOUND).build())
    env.execute("lineage")

    expected = {f"topic:{project}:{name}" for name in names}
    for subtask in range(PARALLELISM):
        events = _events(tmp_path, "lineage-all", subtask)
        assert events[0] == {"event": "open", "attempt": 0}
        datasets = [e for e in events[1:] if e["event"] == "dataset"]
        assert len(datasets) == len(events) - 1, events  # no bound reached
        # Exactly once each, though the cap of two writers reopened them many times.
        assert Counter(d["name"] for d in datasets) == Counter(expected)
        for d in datasets:
            assert d["namespace"] == "pubsub"
            topic = d["name"].rpartition(":")[2]
            assert d["facets"] == {
                "resource": f"projects/{project}/topics/{topic}",
                "service": "pubsub",
                "sink": "lineage-all",
            }

        bounded = _events(tmp_path, "lineage-bounded", subtask)
        assert [e["event"] for e in bounded] == ["open", *["dataset"] * BOUND, "limit"]
        reported = [e["name"] for e in bounded if e["event"] == "dataset"]
        assert len(set(reported)) == BOUND and set(reported) <= expected
        assert bounded[-1] == {"event": "limit", "limit": BOUND}

    # Lineage changed nothing of what was written: both sinks' records are in every topic.
    per_topic: dict[str, list[int]] = defaultdict(list)
    for name in names:
        per_topic[name] = sorted(
            int(m.data) for m in pull_all(project, name, expect=2 * COUNT // TOPICS, timeout_s=60)
        )
    for t, name in enumerate(names):
        assert per_topic[name] == sorted(2 * [i for i in range(COUNT) if i % TOPICS == t])


class FailOnceAllReported(MapFunction):
    """Passes records through; fails once (``marker``), when every subtask of ``sink`` has
    reported ``datasets`` datasets (read from the listener's files in ``directory``) and a
    checkpoint started after that completed: that checkpoint's marker came after the reports,
    so its state holds them all."""

    def __init__(
        self, directory: str, sink: str, datasets: int, checkpoints: str, marker: str
    ) -> None:
        self.directory = directory
        self.sink = sink
        self.datasets = datasets
        self.checkpoints = checkpoints
        self.marker = marker
        self._after: int | None = None
        self._next_look = 0.0

    def map(self, value: Any) -> Any:
        if os.path.exists(self.marker):
            return value
        now = time.monotonic()
        if now < self._next_look:
            return value
        self._next_look = now + 0.02
        if self._after is None:
            if all(
                sum(
                    e["event"] == "dataset"
                    for e in _events_if_any(Path(self.directory), self.sink, s)
                )
                >= self.datasets
                for s in range(PARALLELISM)
            ):
                self._after = latest_checkpoint_started(self.checkpoints)
            return value
        if checkpoint_completed(self.checkpoints, self._after + 1):
            try:
                open(self.marker, "x").close()
            except FileExistsError:  # the other subtask failed first
                return value
            raise RuntimeError("injected failure (test)")
        return value


def _events_if_any(directory: Path, sink: str, subtask: int) -> list[dict[str, Any]]:
    try:
        return _events(directory, sink, subtask)
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_a_restored_subtask_does_not_report_its_datasets_again(
    project: str, tmp_path: Path
) -> None:
    names, resolve = topics_by_number(project, "relineage", TOPICS)
    count = 4_000
    reports = tmp_path / "reports"
    reports.mkdir()
    failover = Failover(tmp_path / "failover")
    marker = str(tmp_path / "failed")

    sink = (
        PubSubSink.builder()
        .set_sink_name("lineage-restored")
        .set_destination_resolver(resolve)
        .set_serializer(PubSubSerializationSchema.payload(lambda r: str(r).encode()))
        .set_writer_options(PubSubWriterOptions.builder().max_buffered_records(100).build())
        .set_lineage_listener(FileLineageListener(str(reports)))
        .build()
    )
    env = make_env(
        parallelism=PARALLELISM, checkpoint_ms=300, extra={**failover.conf(), **SHORT_BUNDLES}
    )
    (
        record_stream(env, count, slow_number)
        .shuffle()  # every subtask writes to every topic (see the test above)
        .map(
            FailOnceAllReported(
                str(reports), "lineage-restored", TOPICS, failover.checkpoints, marker
            )
        )
        .sink_to(sink)
    )
    env.execute("lineage across a restore")
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    expected = Counter({f"topic:{project}:{name}": 1 for name in names})
    for subtask in range(PARALLELISM):
        events = _events(tmp_path / "reports", "lineage-restored", subtask)
        attempts = [e["attempt"] for e in events if e["event"] == "open"]
        assert attempts[0] == 0 and len(attempts) >= 2, events  # it was restarted
        reported = Counter(e["name"] for e in events if e["event"] == "dataset")
        assert reported == expected, events  # once each, over all attempts

    # Every record is in its topic (at least once: the restore replays some).
    for t, name in enumerate(names):
        ids = set(range(t, count, TOPICS))
        pulled = pull_all(project, name, expect=len(ids), timeout_s=60)
        assert {int(m.data) for m in pulled} == ids


def _lineage_graph_sinks(env: Any) -> list[list[tuple[str, str, dict[str, str]]]]:
    """Each sink vertex of the job's lineage graph, as Flink builds it when the job is created:
    its datasets' (namespace, name, config facet)."""
    graph = env._j_stream_execution_environment.getStreamGraph(False).getLineageGraph()
    return [
        [
            (d.namespace(), d.name(), dict(d.facets().get("config").config()))
            for d in vertex.datasets()
        ]
        for vertex in graph.sinks()
    ]


def test_a_fixed_destination_is_in_flinks_lineage_graph_and_a_dynamic_one_is_not() -> None:
    from pyflink_gcp.spanner import DatabaseDestination, SpannerSink

    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    records = record_stream(env, 10, lambda i: i)
    spanner = (
        SpannerSink.builder()
        .set_sink_name("events-db")
        .set_database(DatabaseDestination.of("p", "inst", "events"))
        .set_serializer(lambda record, ctx: None)
        .build()
    )
    records.sink_to(spanner)
    records.sink_to(
        PubSubSink.builder()
        .set_sink_name("dynamic")
        .set_destination_resolver(lambda r, c: TopicDestination.of("p", f"t-{r}"))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: b"x"))
        .build()
    )
    # Turned off, the fixed destination is not named either.
    records.sink_to(
        SpannerSink.builder()
        .set_sink_name("quiet-db")
        .set_database(DatabaseDestination.of("p", "inst", "quiet"))
        .set_serializer(lambda record, ctx: None)
        .set_max_lineage_datasets(0)
        .build()
    )
    assert _lineage_graph_sinks(env) == [
        [
            (
                "spanner",
                "p.inst.events",
                {
                    "resource": "projects/p/instances/inst/databases/events",
                    "service": "spanner",
                    "sink": "events-db",
                },
            )
        ]
    ]
