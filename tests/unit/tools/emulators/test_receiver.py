"""The receiver's inspection endpoint: everything, a path prefix, and installments."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from pyflink_gcp.tools.emulators.receiver import ReceivedCursor, Receiver, fetch_received


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


def post(receiver: Receiver, path: str, body: bytes) -> None:
    request = urllib.request.Request(receiver.url + path, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_fetch_received_answers_every_request_or_those_under_a_prefix(receiver: Receiver) -> None:
    post(receiver, "/a/1", b"one")
    post(receiver, "/b/1", b"two")
    post(receiver, "/a/2?x=1", b"three")
    assert [e["body"] for e in fetch_received(receiver.url)] == [b"one", b"two", b"three"]
    under_a = fetch_received(receiver.url, path_prefix="/a/")
    assert [(e["path"], e["body"]) for e in under_a] == [("/a/1", b"one"), ("/a/2?x=1", b"three")]


def test_a_cursor_answers_only_what_arrived_since_its_last_read(receiver: Receiver) -> None:
    cursor = ReceivedCursor(receiver.url, path_prefix="/a/")
    assert cursor.fetch_new() == []
    post(receiver, "/a/1", b"one")
    post(receiver, "/b/1", b"other")
    assert [e["body"] for e in cursor.fetch_new()] == [b"one"]
    assert cursor.fetch_new() == []
    post(receiver, "/a/2", b"two")
    post(receiver, "/a/3", b"three")
    assert [e["body"] for e in cursor.fetch_new()] == [b"two", b"three"]
