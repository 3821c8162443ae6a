"""Clients that read back what a job wrote, for examples, tests and benchmarks.

The sinks find the emulators through the same variables as these clients, so a script that
checks its output with them reads from wherever the job wrote: the local stack started by
``pyflink-gcp emulators up`` when its variables are set, the service otherwise.
"""

from __future__ import annotations

import os
import time
from typing import Any


def bigquery_client(project: str) -> Any:
    """A ``google.cloud.bigquery.Client`` for ``project`` that honours ``BIGQUERY_EMULATOR_HOST``.

    google-cloud-bigquery reads no emulator variable: without this, a script that points the sink
    at the emulator would read back from the service (or fail looking for Application Default
    Credentials). Anonymous credentials to the emulator, ADC to the service, as the sink does.
    (The tools import nothing of the library, so this is not the sink's own REST client.)
    """
    from google.cloud import bigquery

    host = os.environ.get("BIGQUERY_EMULATOR_HOST")
    if not host:
        return bigquery.Client(project=project)
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return bigquery.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=f"http://{host}"),
    )


def pull_messages(
    project: str,
    subscription: str,
    *,
    expect: int | None = None,
    timeout_s: float = 60.0,
    quiet_s: float = 2.0,
    subscriber: Any = None,
) -> list[Any]:
    """Pull and acknowledge a subscription's messages until nothing more comes.

    Stops when nothing came for ``quiet_s`` seconds, or, with ``expect``, half a second after
    ``expect`` messages arrived (so that extra ones, duplicates, still show), and at the latest
    after ``timeout_s``. Each pull returns at once (``return_immediately``), so an empty
    subscription does not hold the caller for the server's long-poll.

    Args:
        project: The subscription's project.
        subscription: The subscription's id.
        expect: How many messages the caller waits for, if it knows.
        timeout_s: The longest the whole pull may take.
        quiet_s: How long an empty subscription is waited on before it counts as drained.
        subscriber: A ``pubsub_v1.SubscriberClient`` to use (left open); one of its own, closed
            at the end, otherwise.

    Returns:
        The ``PubsubMessage`` of each message received, in arrival order.
    """
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    own = subscriber is None
    client = pubsub_v1.SubscriberClient() if own else subscriber
    path = client.subscription_path(project, subscription)
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            since = time.monotonic() - last
            if expect is not None and len(out) >= expect and since > 0.5:
                break
            response = client.pull(
                request={"subscription": path, "max_messages": 1000, "return_immediately": True},
                timeout=10,
            )
            received = response.received_messages
            if not received:
                if expect is None and since > quiet_s:
                    break
                time.sleep(0.1)
                continue
            last = time.monotonic()
            out += [m.message for m in received]
            client.acknowledge(
                request={"subscription": path, "ack_ids": [m.ack_id for m in received]}
            )
    finally:
        if own:
            client.close()
    return out
