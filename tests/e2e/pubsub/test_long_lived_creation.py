"""The creation budget with its defaults, in real jobs against the Pub/Sub emulator: a backfill
that replays 400 days of a topic per day (``ledger-YYYYMMDD``) finishes, and a resolver that
names a new topic per record ends the job within seconds, naming the bound."""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

import pytest
from google.cloud import pubsub_v1

from pyflink_gcp.core import CreateDisposition
from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import unique

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]

DAYS = 400


class Daily:
    """A topic per day of the record's ``day`` (days since 2024-01-01)."""

    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def __call__(self, record: dict[str, Any], ctx: Any) -> TopicDestination:
        day = date(2024, 1, 1) + timedelta(days=record["day"])
        return TopicDestination.of(self.project, f"{self.prefix}-{day:%Y%m%d}")


class PerRecord:
    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def __call__(self, record: dict[str, Any], ctx: Any) -> TopicDestination:
        return TopicDestination.of(self.project, f"{self.prefix}-{record['i']}")


def sink(resolver: Any) -> PubSubSink:
    return (
        PubSubSink.builder()
        .set_destination_resolver(resolver)
        .set_serializer(PubSubSerializationSchema.payload(lambda r: str(r["i"]).encode()))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .build()  # default writer options: the default creation budget
    )


def topics_with(project: str, prefix: str) -> list[str]:
    publisher = pubsub_v1.PublisherClient()
    try:
        names = [t.name for t in publisher.list_topics(request={"project": f"projects/{project}"})]
    finally:
        publisher.transport.close()
    return [n for n in names if n.rsplit("/", 1)[1].startswith(prefix + "-")]


def test_a_backfill_of_400_daily_topics_finishes_with_the_default_budget(project: str) -> None:
    prefix = unique("ledger")
    count = DAYS * 5
    env = make_env(parallelism=1, checkpoint_ms=1000, restarts=0)
    record_stream(env, count, lambda i: {"i": i, "day": i // 5}, parallelism=1).sink_to(
        sink(Daily(project, prefix))
    )
    env.execute("a year and more of daily topics")
    assert len(topics_with(project, prefix)) == DAYS


def test_a_resolver_naming_a_topic_per_record_ends_the_job_naming_the_bound(
    project: str,
) -> None:
    prefix = unique("runaway")
    env = make_env(parallelism=1, checkpoint_ms=1000, restarts=3)
    record_stream(env, 5_000, lambda i: {"i": i}, parallelism=1).sink_to(
        sink(PerRecord(project, prefix))
    )
    start = time.monotonic()
    with pytest.raises(Exception) as failed:
        env.execute("a topic per record")
    took = time.monotonic() - start
    assert "max_created_destinations=500 per 1h" in str(failed.value)
    assert took < 60, took
