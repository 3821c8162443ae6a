"""The writer fused with the map before it by default, in real PyFlink jobs against Pub/Sub.

The map counts its calls: every call appends the record's id to a file of its own instance, so
a map that runs twice (once fused into the writer, once on its own for another reader) shows
every id twice. The messages are read back from the emulator.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyflink.datastream.functions import MapFunction, RuntimeContext

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique

pytestmark = pytest.mark.e2e

RECORDS = 3000


class CountingMap(MapFunction):
    """Adds a field to the record and logs each call's id under ``<directory>/<name>-*``."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory = directory
        self.name = name
        self._log: object = None

    def open(self, runtime_context: RuntimeContext) -> None:
        path = os.path.join(self.directory, f"{self.name}-{uuid.uuid4().hex}")
        self._log = open(path, "a", buffering=1)  # noqa: SIM115 (closed in close())

    def map(self, value: dict) -> dict:
        self._log.write(f"{value['id']}\n")  # type: ignore[attr-defined]
        return {**value, self.name: True}

    def close(self) -> None:
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]


def calls(directory: Path, name: str) -> Counter:
    """How many times the function ``name`` was called with each id."""
    counts: Counter = Counter()
    for path in directory.glob(f"{name}-*"):
        counts.update(int(line) for line in path.read_text().splitlines())
    return counts


def fused_writer(env) -> bool:
    """Whether the plan runs the counted map inside the writer's operator."""
    plan = [n["type"] for n in json.loads(env.get_execution_plan())["nodes"]]
    return any(n.endswith("counted, pubsub-sink: Writer") for n in plan)


def topic_sink(project: str, topic: str) -> PubSubSink:
    return (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, ctx: TopicDestination.of(project, topic))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
        .build()
    )


@pytest.mark.parametrize(
    "reader", ["none", "after sink_to", "after the plan"], ids=lambda r: f"reader {r}"
)
def test_every_record_is_mapped_once_and_published_whatever_reads_the_map_after_sink_to(
    project: str, tmp_path: Path, reader: str
) -> None:
    topic = unique("fusion")
    make_topics(project, [topic])
    env = make_env(parallelism=2, checkpoint_ms=300)
    mapped = record_stream(env, RECORDS, lambda i: {"id": i}).map(CountingMap(str(tmp_path), "f"))
    mapped = mapped.name("counted")
    mapped.sink_to(topic_sink(project, topic))
    if reader == "after the plan":
        assert fused_writer(env)
    if reader != "none":
        mapped.map(CountingMap(str(tmp_path), "g")).print()

    assert fused_writer(env) is (reader == "none")
    env.execute("default fusion")

    assert calls(tmp_path, "f") == Counter(range(RECORDS))
    if reader != "none":
        assert calls(tmp_path, "g") == Counter(range(RECORDS))
    messages = [json.loads(m.data) for m in pull_all(project, topic, expect=RECORDS)]
    assert sorted(m["id"] for m in messages) == list(range(RECORDS))
    assert all(m["f"] for m in messages)
