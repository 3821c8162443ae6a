"""Compressed Publish requests against the emulator: smaller on the wire, read back identical."""

from __future__ import annotations

import json
import os

import pytest

from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.pubsub.client import EMULATOR_VARIABLE, PubsubMessagePb, PubSubRpc
from tests.integration.pubsub.counting_proxy import CountingProxy
from tests.support.pubsub import make_topics, pull_all, unique

pytestmark = pytest.mark.integration


def batch(tag: str) -> list:
    """50 messages of about 1.2 KB of JSON each (compressible, as JSON is), with attributes."""
    return [
        PubsubMessagePb(
            data=json.dumps({"tag": tag, "id": i, "text": "lorem ipsum dolor " * 64}).encode(),
            attributes={"tag": tag, "id": str(i), "kind": "order"},
        )
        for i in range(50)
    ]


def test_requests_over_the_threshold_are_gzipped_and_the_emulator_accepts_them(project):
    topic = unique("gzip")
    make_topics(project, [topic])
    path = f"projects/{project}/topics/{topic}"
    wire: dict[str, int] = {}
    with CountingProxy(os.environ[EMULATOR_VARIABLE]) as proxy:
        for tag, threshold in (("plain", None), ("gzip", 240), ("gzip-future", 240)):
            rpc = PubSubRpc(Endpoint(proxy.address, True), 10.0, threshold)
            try:
                # A first call below the threshold opens the connection (its preface and
                # settings are not the measured request's).
                rpc.publish(path, [PubsubMessagePb(data=b"warm-up")])
                before = proxy.sent
                if tag == "gzip-future":
                    rpc.publish_future(path, batch(tag)).result(timeout=10)
                else:
                    rpc.publish(path, batch(tag))
                wire[tag] = proxy.sent - before
            finally:
                rpc.close()
    data_bytes = sum(len(m.data) for m in batch("plain"))
    assert wire["plain"] > data_bytes
    # gzip shrinks repetitive JSON many times over; a tenth leaves room for framing.
    assert wire["gzip"] < wire["plain"] / 10
    assert wire["gzip-future"] < wire["plain"] / 10

    got = pull_all(project, topic, expect=3 * 51)
    assert sum(m.data == b"warm-up" for m in got) == 3
    for tag in ("plain", "gzip", "gzip-future"):
        expected = sorted((m.data, tuple(sorted(m.attributes.items()))) for m in batch(tag))
        read = sorted(
            (m.data, tuple(sorted(m.attributes.items())))
            for m in got
            if m.attributes.get("tag") == tag
        )
        assert read == expected, tag
