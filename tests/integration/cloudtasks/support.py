"""Helpers shared by the Cloud Tasks integration and end-to-end tests: queues and dispatches."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

from pyflink_gcp.tools.emulators import EmulatorStack

LOCATION = "us-central1"


def suffix() -> str:
    return uuid.uuid4().hex[:8]


def admin_client(stack: EmulatorStack) -> tasks_v2.CloudTasksClient:
    """A client of the emulator (no standard variable: an explicit insecure channel)."""
    channel = grpc.insecure_channel(stack.env["CLOUD_TASKS_EMULATOR_HOST"])
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


def create_queues(stack: EmulatorStack, names: list[str]) -> list[str]:
    """Create queues (the sink never creates queues). Returns their names.

    At most a few concurrent dispatches per queue: the receiver is a small threaded server with
    a short listen backlog, living in the test process next to the PyFlink workers; with
    hundreds of concurrent dispatches some connections hang until the 10-minute dispatch
    deadline, and those tasks look lost.
    """
    client = admin_client(stack)
    parent = f"projects/{stack.project}/locations/{LOCATION}"
    created = []
    for name in names:
        queue = client.create_queue(
            parent=parent,
            queue=tasks_v2.Queue(
                name=f"{parent}/queues/{name}",
                rate_limits=tasks_v2.RateLimits(
                    max_dispatches_per_second=1000, max_concurrent_dispatches=4
                ),
            ),
        )
        created.append(queue.name)
    return created


def received_under(stack: EmulatorStack, prefix: str) -> list[dict[str, Any]]:
    return [r for r in stack.received() if r["path"].startswith(prefix)]


def wait_for_dispatches(
    stack: EmulatorStack,
    prefix: str,
    expected: int,
    *,
    distinct: Callable[[dict[str, Any]], Any] | None = None,
    timeout: float = 120.0,
    settle: float = 1.5,
) -> list[dict[str, Any]]:
    """Requests under ``prefix`` once ``expected`` of them (or of their ``distinct`` keys)
    arrived and none came for ``settle`` seconds (so that duplicates would show), or whatever
    arrived when ``timeout`` passed.

    Dispatch is asynchronous: the emulator sends tasks to the receiver after CreateTask returns.
    """
    deadline = time.monotonic() + timeout
    seen = -1
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        got = received_under(stack, prefix)
        done = len({distinct(r) for r in got}) if distinct else len(got)
        if len(got) != seen:
            seen = len(got)
            quiet_since = time.monotonic()
        elif done >= expected and time.monotonic() - quiet_since >= settle:
            return got
        time.sleep(0.1)
    return received_under(stack, prefix)
