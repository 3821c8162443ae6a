"""TopicDestination: validated when built, equal by resource name, project from the environment."""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.pubsub import TopicDestination


def test_equality_is_the_resource_name() -> None:
    a = TopicDestination.of("p", "orders")
    assert a == TopicDestination.from_resource_name("projects/p/topics/orders")
    assert str(a) == "projects/p/topics/orders"
    assert (a.project, a.topic) == ("p", "orders")
    assert pickle.loads(pickle.dumps(a)) == a


def test_impossible_topic_ids_fail_when_built() -> None:
    with pytest.raises(ValueError, match="invalid Pub/Sub topic id 'ab'"):
        TopicDestination.of("p", "ab")
