"""The read-back clients: the BigQuery client finds the emulator; the pull drains and stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from pyflink_gcp.tools.emulators.clients import bigquery_client, pull_messages


def test_the_bigquery_client_goes_to_the_emulator_with_anonymous_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", "127.0.0.1:9050")
    client = bigquery_client("demo-project")
    assert client.project == "demo-project"
    assert client._connection.API_BASE_URL == "http://127.0.0.1:9050"
    assert isinstance(client._credentials, AnonymousCredentials)


@dataclass
class Subscriber:
    """Answers each pull with the next batch of messages (an empty batch when none is left)."""

    batches: list[list[str]]
    acked: list[str] = field(default_factory=list)
    pulls: int = 0
    closed: bool = False

    def subscription_path(self, project: str, name: str) -> str:
        return f"projects/{project}/subscriptions/{name}"

    def pull(self, request: dict[str, Any], timeout: float) -> Any:
        assert request["return_immediately"] is True
        self.pulls += 1
        batch = self.batches.pop(0) if self.batches else []
        received = [
            SimpleNamespace(ack_id=f"ack-{data}", message=SimpleNamespace(data=data))
            for data in batch
        ]
        return SimpleNamespace(received_messages=received)

    def acknowledge(self, request: dict[str, Any]) -> None:
        self.acked += request["ack_ids"]

    def close(self) -> None:
        self.closed = True


def test_every_message_is_returned_and_acknowledged_until_the_subscription_is_quiet() -> None:
    subscriber = Subscriber([["a", "b"], [], ["c"]])
    messages = pull_messages("p", "s", quiet_s=0.3, subscriber=subscriber)
    assert [m.data for m in messages] == ["a", "b", "c"]
    assert subscriber.acked == ["ack-a", "ack-b", "ack-c"]
    # A subscriber handed in stays open for the caller.
    assert not subscriber.closed


def test_with_expect_the_pull_waits_past_quiet_spells_for_late_messages() -> None:
    subscriber = Subscriber([["a"], [], [], [], [], ["b"]])
    messages = pull_messages("p", "s", expect=2, quiet_s=0.0, subscriber=subscriber)
    assert [m.data for m in messages] == ["a", "b"]


def test_with_expect_extra_messages_still_show() -> None:
    subscriber = Subscriber([["a", "b"], ["dup-a"]])
    messages = pull_messages("p", "s", expect=2, subscriber=subscriber)
    assert [m.data for m in messages] == ["a", "b", "dup-a"]


def test_the_pull_ends_at_its_timeout() -> None:
    subscriber = Subscriber([])
    assert pull_messages("p", "s", expect=1, timeout_s=0.3, subscriber=subscriber) == []
    assert subscriber.pulls >= 2
