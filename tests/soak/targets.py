"""What each sink's soak run needs before it starts, and how every record is read back.

Every destination a run can reach is known in advance (its index range comes from the job's
``Churn``), so the soak creates them all up front where the service would otherwise drop or
refuse the data: a Pub/Sub topic keeps a message only for subscriptions that exist when it is
published, BigQuery's default stream and Spanner need their tables, Cloud Tasks its queues.
Bigtable's sink creates its tables itself (``CREATE_IF_NEEDED``), which the soak leaves to it:
table creation then churns along with the writers.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

from pyflink_gcp.tools.emulators import EmulatorStack
from pyflink_gcp.tools.emulators.receiver import ReceivedCursor
from tests.support.pubsub import make_topics, pull_all

LOCATION = "us-central1"
SINKS = ("pubsub", "bigquery", "bigtable", "spanner", "cloudtasks")
#: Every service a sink's job needs running (Cloud Tasks dispatches to the receiver).
STACK_SERVICES = {
    "pubsub": ("pubsub",),
    "bigquery": ("bigquery",),
    "cloudtasks": ("cloudtasks", "receiver"),
    "bigtable": ("bigtable",),
    "spanner": ("spanner",),
}
#: Sinks that keep a writer per destination (idle timeout, LRU cap); Spanner writes one
#: database through one writer, its churn is over tables only.
REGISTRY = {"pubsub", "bigquery", "bigtable", "cloudtasks"}


def _bigquery(project: str) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    return bigquery.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint="http://" + os.environ["BIGQUERY_EMULATOR_HOST"]),
    )


def _tasks() -> Any:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    channel = grpc.insecure_channel(os.environ["CLOUD_TASKS_EMULATOR_HOST"])
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


def _spanner(project: str) -> Any:
    from google.cloud import spanner

    client = spanner.Client(project=project, disable_builtin_metrics=True)
    return client.instance(os.environ["SPANNER_INSTANCE"]).database(os.environ["SPANNER_DATABASE"])


def prepare(sink: str, project: str, name: str, count: int, stack: EmulatorStack) -> list[str]:
    """Creates the run's ``count`` destinations (indexes 0..count-1) where the sink needs
    them to exist; returns the job's extra arguments."""
    if sink == "pubsub":
        make_topics(project, [f"{name}-{i:03d}" for i in range(count)])
        return []
    if sink == "bigquery":
        from google.cloud import bigquery

        client = _bigquery(project)
        try:
            client.create_dataset(bigquery.Dataset(f"{project}.{name}"))
            schema = [bigquery.SchemaField("id", "INT64", mode="REQUIRED")]
            for i in range(count):
                client.create_table(bigquery.Table(f"{project}.{name}.d{i:03d}", schema=schema))
        finally:
            client.close()
        return []
    if sink == "cloudtasks":
        from google.cloud import tasks_v2

        client = _tasks()
        parent = f"projects/{project}/locations/{LOCATION}"
        for i in range(count):
            queue = tasks_v2.Queue(
                name=f"{parent}/queues/{name}-{i:03d}",
                rate_limits=tasks_v2.RateLimits(
                    max_dispatches_per_second=100, max_concurrent_dispatches=4
                ),
            )
            client.create_queue(parent=parent, queue=queue)
        return ["--target", f"{stack.receiver_url}/soak/{name}"]
    if sink == "bigtable":
        return []
    if sink == "spanner":
        ddl = [
            f"CREATE TABLE {name}_{i:03d} (id INT64 NOT NULL) PRIMARY KEY (id)"
            for i in range(count)
        ]
        _spanner(project).update_ddl(ddl).result(600)
        return [
            "--instance",
            os.environ["SPANNER_INSTANCE"],
            "--database",
            os.environ["SPANNER_DATABASE"],
        ]
    raise ValueError(sink)


def read_back(
    sink: str, project: str, name: str, count: int, stack: EmulatorStack, expected: int
) -> list[int]:
    """Every record id the run's destinations hold, once per copy (a duplicate twice), read
    once the job ended. ``expected`` is how many distinct ids the sink was handed, which the
    Cloud Tasks wait counts to (its emulator dispatches behind the sink)."""
    ids: list[int] = []
    if sink == "pubsub":
        for i in range(count):
            pulled = pull_all(project, f"{name}-{i:03d}", timeout_s=300, quiet_s=2.0)
            ids += [json.loads(m.data)["id"] for m in pulled]
        return ids
    if sink == "bigquery":
        client = _bigquery(project)
        try:
            for i in range(count):
                rows = client.query(f"SELECT id FROM `{project}.{name}.d{i:03d}`").result()
                ids += [row["id"] for row in rows]
        finally:
            client.close()
        return ids
    if sink == "cloudtasks":
        return _dispatched(stack, f"/soak/{name}", expected)
    if sink == "bigtable":
        return _bigtable_ids(project, name, count)
    if sink == "spanner":
        with _spanner(project).snapshot(multi_use=True) as snapshot:
            for i in range(count):
                ids += [row[0] for row in snapshot.execute_sql(f"SELECT id FROM {name}_{i:03d}")]
        return ids
    raise ValueError(sink)


def _dispatched(stack: EmulatorStack, path: str, count: int, timeout: float = 600.0) -> list[int]:
    """The ids of the webhook calls under ``path``, once ``count`` distinct ones arrived and
    then nothing for 5 s (dispatch runs behind the sink, at the queues' rate). The calls are
    read in installments: an hour's hundred thousand, read whole on every poll, outlasted the
    read's timeout."""
    deadline = time.monotonic() + timeout
    cursor = ReceivedCursor(stack.receiver_url, path_prefix=path, timeout=60.0)
    ids: list[int] = []
    quiet_since = time.monotonic()
    while True:
        new = [json.loads(r["body"])["id"] for r in cursor.fetch_new()]
        if new:
            ids += new
            quiet_since = time.monotonic()
        elif len(set(ids)) >= count and time.monotonic() - quiet_since >= 5:
            return ids
        if time.monotonic() > deadline:
            return ids
        time.sleep(1.0)


def _bigtable_ids(project: str, name: str, count: int) -> list[int]:
    """Versions of each row's ``m:id`` cell: one per record, a second only if a replay wrote
    another timestamp (the job stamps the cell from the id, so a replay rewrites it).
    A table the sink never created (no record reached its index) is skipped."""
    from google.api_core.exceptions import NotFound
    from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        client = BigtableDataClient(project=project)
    ids: list[int] = []
    try:
        for i in range(count):
            try:
                rows = list(client.get_table(name, f"d{i:03d}").read_rows(ReadRowsQuery()))
            except NotFound:
                continue
            ids += [int(row.row_key) for row in rows for _ in row.cells]
    finally:
        client.close()
    return ids
