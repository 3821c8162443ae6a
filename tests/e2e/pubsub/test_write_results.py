"""``sink.write_with_results(ds)`` on an at-least-once Pub/Sub sink, on a keyed stream: the
results' counts per topic are the messages each subscription holds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from tests.e2e.bigquery.test_write_results import AppendJson
from tests.support.jobs import Paced, make_env, record_stream
from tests.support.jsonl import read_json_lines
from tests.support.pubsub import make_topics, pull_all, unique

pytestmark = pytest.mark.e2e

TOPICS = 3


class ByRemainder:
    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def resolve(self, record: int, context: object) -> TopicDestination:
        return TopicDestination.of(self.project, f"{self.prefix}-{record % TOPICS}")


def test_results_per_topic_and_checkpoint_add_up_to_the_published_messages(
    project: str, tmp_path: Path
) -> None:
    count = 1_200
    prefix = unique("results")
    topics = [f"{prefix}-{t}" for t in range(TOPICS)]
    make_topics(project, topics)
    sink = (
        PubSubSink.builder()
        .set_sink_name("numbers")
        .set_destination_resolver(ByRemainder(project, prefix))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: str(r).encode()))
        .build()
    )
    env = make_env(
        parallelism=2, checkpoint_ms=300, extra={"python.fn-execution.bundle.size": "50"}
    )
    numbers = record_stream(env, count, lambda i: i).map(Paced(every=20, seconds=0.05))
    results = sink.write_with_results(numbers.key_by(lambda i: i % 7))
    results.map(AppendJson(str(tmp_path / "results.jsonl")))
    env.execute("pubsub write results")

    got = read_json_lines(str(tmp_path / "results.jsonl"))
    published = {
        topic: sorted(int(m.data) for m in pull_all(project, topic, expect=count // TOPICS))
        for topic in topics
    }
    assert published == {f"{prefix}-{t}": list(range(t, count, TOPICS)) for t in range(TOPICS)}
    per_topic: Counter[str] = Counter()
    for result in got:
        assert result["sink"] == "numbers" and result["method"] == "AT_LEAST_ONCE"
        assert result["first_event_time"] is None and result["last_event_time"] is None
        per_topic[result["destination"]] += result["count"]
    assert per_topic == {f"projects/{project}/topics/{topic}": count // TOPICS for topic in topics}
    keys = [(r["destination"], r["checkpoint_id"], r["subtask"]) for r in got]
    assert len(keys) == len(set(keys)), "two results of one topic, checkpoint and subtask"
    assert len({r["checkpoint_id"] for r in got}) > 2, "expected results of several checkpoints"
    print(json.dumps(Counter(r["checkpoint_id"] for r in got)))
