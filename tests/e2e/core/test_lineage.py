"""Lineage of dynamic destinations in a real PyFlink job: records routed to several Pub/Sub topics
through the emulator, with a listener that writes what each subtask reports to a file.

Two sinks of one job write the same records to the same topics:

- ``lineage-all`` keeps at most two writers per subtask (``max_active_destinations=2``), so it
  opens writers for the same topics again and again; each subtask still reports each topic
  exactly once.
- ``lineage-bounded`` reports at most three datasets per subtask: each subtask reports three
  topics, says once that the bound was reached, and nothing more.

The records are read back from the emulator, so lineage changed nothing of what was written.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp import LineageDataset, LineageListener
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.pubsub import (
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique

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
    names = [unique(f"lineage{t}") for t in range(TOPICS)]
    make_topics(project, names)
    topics = [TopicDestination.of(project, name) for name in names]

    def resolve(record: int, ctx: Any) -> TopicDestination:
        return topics[record % TOPICS]

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
