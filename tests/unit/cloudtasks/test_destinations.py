"""QueueDestination: validated at construction, equal by resource name, cached, picklable."""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.cloudtasks import QueueDestination


def test_queue_destination_is_its_resource_name() -> None:
    queue = QueueDestination.of("p", "us-central1", "webhooks-1")
    assert str(queue) == "projects/p/locations/us-central1/queues/webhooks-1"
    assert (queue.project, queue.location, queue.queue) == ("p", "us-central1", "webhooks-1")
    assert queue == QueueDestination("p", "us-central1", "webhooks-1")
    assert hash(queue) == hash(QueueDestination("p", "us-central1", "webhooks-1"))
    assert queue != QueueDestination.of("p", "us-central1", "webhooks-2")
    assert pickle.loads(pickle.dumps(queue)) == queue
    assert QueueDestination.from_resource_name(str(queue)) == queue


def test_of_returns_the_cached_value() -> None:
    assert QueueDestination.of("p", "l", "q") is QueueDestination.of("p", "l", "q")


@pytest.mark.parametrize(
    ("project", "location", "queue"),
    [("", "l", "q"), ("p", "", "q"), ("p", "l", ""), ("p", "l", "under_score"), ("p", "l", "a/b")],
)
def test_queue_destination_rejects_impossible_names(
    project: str, location: str, queue: str
) -> None:
    with pytest.raises(ValueError):
        QueueDestination.of(project, location, queue)


def test_queue_destination_parse_rejects_other_names() -> None:
    with pytest.raises(ValueError, match="not a Cloud Tasks queue"):
        QueueDestination.from_resource_name("projects/p/topics/t")


def test_queue_destination_is_immutable() -> None:
    queue = QueueDestination.of("p", "l", "q")
    with pytest.raises(AttributeError):
        queue._name = "x"  # type: ignore[misc]
