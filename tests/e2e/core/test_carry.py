"""Records carried across checkpoints (``max_carry_time``) in a real PyFlink job, through a
failover: what a completed checkpoint carried comes back from the marker operator's state.

The sink writes 3,000 records to 20 Pub/Sub topics with ``max_carry_time`` of an hour, so no
topic gathers the 500 records that would send its batch: nothing is sent before the end of
input, and every checkpoint keeps the records carried in the operator's state. A task fails
once a checkpoint completed; the source replays only the records after it, so the records
before it reach their topics only if the restored operator handed them back to the writer.
Every record is read back from the emulator.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, PubSubWriterOptions
from tests.support.jobs import SHORT_BUNDLES, FailOnce, make_env, record_stream, slow_number
from tests.support.pubsub import pull_all, topics_by_number
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

TOPICS = 20
COUNT = 3_000


def test_records_carried_at_a_checkpoint_come_back_after_a_restore(
    project: str, tmp_path: Path
) -> None:
    names, resolve = topics_by_number(project, "carry", TOPICS)
    failover = Failover(tmp_path / "failover")
    marker = str(tmp_path / "failed")

    sink = (
        PubSubSink.builder()
        .set_sink_name("carried")
        .set_destination_resolver(resolve)
        .set_serializer(PubSubSerializationSchema.payload(lambda r: str(r).encode()))
        .set_writer_options(
            PubSubWriterOptions.builder()
            .max_carry_time(timedelta(hours=1))
            .max_buffered_records(100)
            .build()
        )
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=300, extra={**failover.conf(), **SHORT_BUNDLES})
    (
        record_stream(env, COUNT, slow_number)
        .map(FailOnce(marker, lambda r: r >= COUNT // 3, after_checkpoint=failover.checkpoints))
        .sink_to(sink)
    )
    env.execute("carried records across a restore")
    failover.assert_restored()

    for t, name in enumerate(names):
        ids = set(range(t, COUNT, TOPICS))
        pulled = pull_all(project, name, expect=len(ids), timeout_s=60)
        assert {int(m.data) for m in pulled} == ids, name
