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


def test_a_topic_without_project_is_in_google_cloud_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The variable is read when the value is built and becomes part of its resource name."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    short = TopicDestination.of("orders")
    assert short == TopicDestination.of("env-project", "orders")
    assert pickle.loads(pickle.dumps(short)) == short
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    assert short.project == "env-project"
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT is not set"):
        TopicDestination.of("orders")
    with pytest.raises(TypeError, match=r"TopicDestination.of\(topic\)"):
        TopicDestination.of("p", "orders", "extra")


def test_impossible_topic_ids_fail_when_built() -> None:
    with pytest.raises(ValueError, match="invalid Pub/Sub topic id 'ab'"):
        TopicDestination.of("p", "ab")
