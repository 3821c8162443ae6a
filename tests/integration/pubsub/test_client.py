"""The Pub/Sub rpc against the emulator: the answers the writer's error mapping relies on."""

from __future__ import annotations

import grpc
import pytest

from pyflink_gcp.pubsub.client import PubsubMessagePb, PubSubRpc, resolve_pubsub_endpoint
from tests.support.pubsub import make_topics, unique

pytestmark = pytest.mark.integration


def test_publish_to_a_missing_topic_is_answered_not_found(project):
    """Under CREATE_NEVER the sink does not check a topic before it publishes: it relies on
    the service answering a Publish to a missing topic with NOT_FOUND, as the emulator must
    too (a blocking call and a future alike)."""
    present = unique("present")
    make_topics(project, [present])
    rpc = PubSubRpc(resolve_pubsub_endpoint(None), request_timeout_s=10)
    try:
        message = [PubsubMessagePb(data=b"x")]
        missing = f"projects/{project}/topics/{unique('missing')}"
        with pytest.raises(grpc.RpcError) as err:
            rpc.publish(missing, message)
        assert err.value.code() is grpc.StatusCode.NOT_FOUND
        future = rpc.publish_future(missing, message)
        assert future.exception(timeout=10).code() is grpc.StatusCode.NOT_FOUND
        assert len(rpc.publish(f"projects/{project}/topics/{present}", message).message_ids) == 1
    finally:
        rpc.close()
