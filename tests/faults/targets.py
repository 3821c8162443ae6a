"""The fault suite's sink configurations: what each needs before a run, how to read every
record back, and whether its emulator keeps its data across a restart.

Each :class:`Target` is one row of the suite's table (a sink, and for BigQuery a write method).
Its destinations are named after the run (``name``), two per run (even and odd ids), so runs
never share state and a read-back sees only its own run's records.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyflink_gcp.tools.emulators import EmulatorStack
from pyflink_gcp.tools.emulators.receiver import ReceivedCursor
from tests.support.pubsub import make_topics, pull_all

PARITIES = ("even", "odd")
LOCATION = "us-central1"


@dataclass(frozen=True)
class Target:
    """One sink (and write method) under test.

    Attributes:
        sink: The job's ``--sink``.
        method: The BigQuery write method, or ``-``.
        guarantee: ``exactly once``, ``idempotent`` or ``at least once``: whether duplicates
            in the destination's user-visible state fail the suite (the first two) or are
            reported. Replays an idempotent write hides are reported, never failed: the
            sink's documented guarantee (docs/guarantees.md) is that the replay leaves the same
            state, not that there is none.
        services: The emulators the sink writes to, which an emulator fault stops.
    """

    sink: str
    method: str
    guarantee: str
    services: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.sink if self.method == "-" else f"{self.sink}/{self.method}"

    @property
    def duplicates_allowed(self) -> bool:
        return self.guarantee == "at least once"


TARGETS: dict[str, list[Target]] = {
    "pubsub": [Target("pubsub", "-", "at least once", ("pubsub",))],
    "bigquery": [
        Target("bigquery", "STORAGE_API_AT_LEAST_ONCE", "at least once", ("bigquery",)),
        Target("bigquery", "BUFFERED_STREAM", "exactly once", ("bigquery",)),
        Target("bigquery", "FILE_LOADS", "exactly once", ("bigquery", "gcs")),
    ],
    "cloudtasks": [Target("cloudtasks", "-", "idempotent", ("cloudtasks",))],
    "bigtable": [Target("bigtable", "-", "idempotent", ("bigtable",))],
    "spanner": [Target("spanner", "-", "idempotent", ("spanner",))],
}

#: The write methods the configurations other than ``default`` apply to.
EXACTLY_ONCE_METHODS = ("BUFFERED_STREAM", "FILE_LOADS")


@dataclass(frozen=True)
class Config:
    """A configuration users choose.

    Attributes:
        name: What ``--config`` takes.
        summary: One line for the table's reader.
        unaligned: Forced unaligned checkpoints (job.py's ``--unaligned``).
        min_load_interval_s: FILE_LOADS ``min_load_interval`` in seconds; None leaves the
            option's default (90 s).
        location: The run's dataset (and bucket) location; None: the emulator's default.
        parallelism: The job's parallelism at submission.
        rescale_to: Once the faults are in, the job is stopped with a savepoint and restored
            at each of these parallelisms in turn, under load; empty: the job runs to its end
            at ``parallelism``.
        every_target: Applies to every target, not only the exactly-once BigQuery methods.
        max_carry_s: The writers' ``max_carry_time`` in seconds: records wait across
            checkpoints in the writer operator's state. Such a configuration applies to the
            targets that are not exactly once (the only ones that may carry).
    """

    name: str
    summary: str
    unaligned: bool = False
    min_load_interval_s: float | None = 0.0
    location: str | None = None
    parallelism: int = 4
    rescale_to: tuple[int, ...] = ()
    every_target: bool = False
    max_carry_s: float | None = None

    def applies(self, target: Target) -> bool:
        if self.max_carry_s is not None:
            return target.method not in EXACTLY_ONCE_METHODS
        return (
            self.name == "default"
            or self.every_target
            or (target.sink == "bigquery" and target.method in EXACTLY_ONCE_METHODS)
        )

    def job_args(self, target: Target) -> list[str]:
        """job.py's arguments for this configuration."""
        args = ["--unaligned"] if self.unaligned else []
        if target.method == "FILE_LOADS":
            interval = -1.0 if self.min_load_interval_s is None else self.min_load_interval_s
            args += ["--min-load-interval-s", f"{interval:g}"]
        if self.max_carry_s is not None:
            args += ["--max-carry-s", f"{self.max_carry_s:g}"]
        return args


CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("default", "aligned checkpoints, FILE_LOADS min_load_interval 0"),
        Config(
            "unaligned",
            "forced unaligned checkpoints (aligned-checkpoint-timeout 0 s), "
            "FILE_LOADS default min_load_interval (90 s)",
            unaligned=True,
            min_load_interval_s=None,
        ),
        Config(
            "default-interval",
            "aligned checkpoints, FILE_LOADS default min_load_interval (90 s)",
            min_load_interval_s=None,
        ),
        Config(
            "regional",
            "dataset in europe-west3 (its load jobs found only with their location), "
            "aligned, FILE_LOADS min_load_interval 0",
            location="europe-west3",
        ),
        Config(
            "rescale",
            "submitted at parallelism 2; after the faults, stop-with-savepoint and restore at 4, "
            "then again at 1, under load; aligned, FILE_LOADS min_load_interval 0",
            parallelism=2,
            rescale_to=(4, 1),
            every_target=True,
        ),
        Config(
            "carried",
            "max_carry_time 30 s: each destination's records wait across checkpoints in the "
            "writer operator's state until 500 or 30 s old; aligned",
            max_carry_s=30.0,
        ),
        Config(
            "carried-rescale",
            "max_carry_time 30 s; submitted at parallelism 2, after the faults "
            "stop-with-savepoint and restore at 4, then at 1, under load; aligned",
            parallelism=2,
            rescale_to=(4, 1),
            max_carry_s=30.0,
        ),
        Config(
            "carried-unaligned",
            "max_carry_time 30 s with forced unaligned checkpoints (aligned-checkpoint-timeout "
            "0 s): the carried chunks are taken while records are still in flight",
            unaligned=True,
            max_carry_s=30.0,
        ),
    )
}

#: Every service a sink's job needs running (the Cloud Tasks emulator dispatches to the
#: receiver, FILE_LOADS stages in GCS).
STACK_SERVICES = {
    "pubsub": ("pubsub",),
    "bigquery": ("bigquery", "gcs"),
    "cloudtasks": ("cloudtasks", "receiver"),
    "bigtable": ("bigtable",),
    "spanner": ("spanner",),
}


def run_name() -> str:
    """A name every service accepts for a topic, dataset, queue, instance and table."""
    return f"faults{uuid.uuid4().hex[:8]}"


# -- clients ------------------------------------------------------------------------------


def _bigquery(project: str) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    return bigquery.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint="http://" + os.environ["BIGQUERY_EMULATOR_HOST"]),
    )


def _storage(project: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    return storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]},
    )


def _tasks() -> Any:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    channel = grpc.insecure_channel(os.environ["CLOUD_TASKS_EMULATOR_HOST"])
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


def _bigtable_admin(project: str, instance: str) -> Any:
    from google.cloud import bigtable

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bigtable.Client(project=project, admin=True).instance(instance)


def _spanner(project: str) -> Any:
    from google.cloud import spanner

    client = spanner.Client(project=project, disable_builtin_metrics=True)
    return client.instance(os.environ["SPANNER_INSTANCE"]).database(os.environ["SPANNER_DATABASE"])


# -- before a run -------------------------------------------------------------------------


def prepare(
    target: Target, project: str, name: str, stack: EmulatorStack, location: str | None = None
) -> list[str]:
    """Creates what the run's sink does not create itself; returns the job's extra arguments.

    ``location`` places a BigQuery run's dataset (and FILE_LOADS's bucket) in that location.
    """
    if target.sink == "pubsub":
        make_topics(project, [f"{name}-{p}" for p in PARITIES])
        return []
    if target.sink == "bigquery":
        from google.cloud import bigquery

        client = _bigquery(project)
        dataset = bigquery.Dataset(f"{project}.{name}")
        if location is not None:
            dataset.location = location
        created = client.create_dataset(dataset)
        if location is not None and str(created.location).lower() != location.lower():
            raise RuntimeError(f"dataset {name} created in {created.location}, not {location}")
        for p in PARITIES:
            schema = [bigquery.SchemaField("id", "INT64", mode="REQUIRED")]
            client.create_table(bigquery.Table(f"{project}.{name}.{p}", schema=schema))
        client.close()
        if target.method != "FILE_LOADS":
            return []
        gcs = _storage(project)
        gcs.create_bucket(name, location=location)
        gcs.close()
        return ["--bucket", name]
    if target.sink == "cloudtasks":
        from google.cloud import tasks_v2

        client = _tasks()
        parent = f"projects/{project}/locations/{LOCATION}"
        for p in PARITIES:
            queue = tasks_v2.Queue(
                name=f"{parent}/queues/{name}-{p}",
                rate_limits=tasks_v2.RateLimits(
                    max_dispatches_per_second=500, max_concurrent_dispatches=8
                ),
            )
            client.create_queue(parent=parent, queue=queue)
        return ["--target", f"{stack.receiver_url}/faults/{name}"]
    if target.sink == "bigtable":
        return []  # the sink creates the tables, the emulator any instance
    if target.sink == "spanner":
        # (id, k): k is empty unless job.py's --break idempotence; the audit table gets a row
        # per write attempt (see job.py's SpannerWrites).
        ddl = [
            f"CREATE TABLE {name} (id INT64 NOT NULL, k STRING(36) NOT NULL, parity STRING(8))"
            " PRIMARY KEY (id, k)",
            f"CREATE TABLE {name}_audit (id INT64 NOT NULL, attempt STRING(36) NOT NULL)"
            " PRIMARY KEY (id, attempt)",
        ]
        _spanner(project).update_ddl(ddl).result(300)
        return [
            "--instance",
            os.environ["SPANNER_INSTANCE"],
            "--database",
            os.environ["SPANNER_DATABASE"],
        ]
    raise ValueError(target.sink)


def destination_names(target: Target, project: str, name: str) -> list[str]:
    """The names a failure of the run's sink must mention (any one of them)."""
    if target.sink == "pubsub":
        return [f"projects/{project}/topics/{name}-{p}" for p in PARITIES]
    if target.sink == "bigquery":
        return [f"{project}.{name}.{p}" for p in PARITIES]
    if target.sink == "cloudtasks":
        return [f"projects/{project}/locations/{LOCATION}/queues/{name}-{p}" for p in PARITIES]
    if target.sink == "bigtable":
        return [f"projects/{project}/instances/{name}/tables/{p}" for p in PARITIES]
    database = f"instances/{os.environ['SPANNER_INSTANCE']}/databases/"
    return [f"projects/{project}/{database}{os.environ['SPANNER_DATABASE']}"]


# -- after a run --------------------------------------------------------------------------


@dataclass
class Readback:
    """What a run's destinations hold.

    Attributes:
        ids: Every record the destination's user-visible state holds, once per copy (a
            duplicate twice): messages, rows, webhook calls, versions of the Bigtable cell with
            the record's own timestamp, rows of the Spanner table.
        writes: Where the destination also records every write of a record that reached it
            (Spanner's audit rows, Bigtable's server-timestamped versions), their ids, once per
            write; None where the user-visible copies are that record already.
    """

    ids: list[int]
    writes: list[int] | None = None


def read_back(
    target: Target, project: str, name: str, stack: EmulatorStack, expected: set[int]
) -> Readback:
    """Every record the destinations hold (see :class:`Readback`), read once the job ended;
    ``expected`` are the ids the job handed its sink, which the Cloud Tasks wait counts to
    (its emulator dispatches behind the sink).

    Idempotent sinks are counted at the level where a duplicate would show: Cloud Tasks by
    dispatched webhook calls (a second task for one record would call twice), Bigtable by
    versions of the cell the job stamps with the record's own timestamp (a replay that wrote a
    new timestamp would add one), Spanner by rows of a table keyed ``(id, k)`` (a replay that
    wrote another key would add one). Their replays themselves, which the idempotent writes
    make harmless, are counted from the writes Bigtable and Spanner also record.
    """
    if target.sink == "pubsub":
        # The job has ended: everything it published is in the subscriptions, so pull until
        # nothing came for a while (an expected count would wait out the timeout on a loss).
        ids: list[int] = []
        for p in PARITIES:
            pulled = pull_all(project, f"{name}-{p}", timeout_s=600, quiet_s=10.0)
            ids += [json.loads(m.data)["id"] for m in pulled]
        return Readback(ids)
    if target.sink == "bigquery":
        client = _bigquery(project)
        try:
            ids = []
            location = client.get_dataset(f"{project}.{name}").location
            for p in PARITIES:
                sql = f"SELECT id FROM `{project}.{name}.{p}`"
                rows = client.query(sql, location=location).result()
                ids += [row["id"] for row in rows]
            return Readback(ids)
        finally:
            client.close()
    if target.sink == "cloudtasks":
        return Readback(_dispatched(stack, f"/faults/{name}", len(expected)))
    if target.sink == "bigtable":
        return _bigtable_cells(project, name)
    with _spanner(project).snapshot(multi_use=True) as snapshot:
        rows = [row[0] for row in snapshot.execute_sql(f"SELECT id FROM {name}")]
        audit = [row[0] for row in snapshot.execute_sql(f"SELECT id FROM {name}_audit")]
    return Readback(rows, audit)


def staged_left(target: Target, project: str, name: str) -> list[str] | None:
    """The objects left in a FILE_LOADS run's bucket (every one should have been loaded and
    deleted, or swept as an orphan, by the job's end); None for any other target."""
    if target.method != "FILE_LOADS":
        return None
    gcs = _storage(project)
    try:
        return [blob.name for blob in gcs.list_blobs(name)]
    finally:
        gcs.close()


def _dispatched(
    stack: EmulatorStack, path: str, count: int, stall_timeout: float = 60.0
) -> list[int]:
    """The ids of the webhook calls under ``path``, once ``count`` distinct ones arrived and
    then nothing for 3 s, or once none arrived for ``stall_timeout`` seconds.

    Dispatch runs behind the sink, at the queues' rate (500 a second each), so a run that
    handed 200,000 records takes minutes to read back: the wait is bounded by a stall, not by
    a fixed time that a long run outlasts (and reports as loss). The receiver is read in
    installments (:class:`ReceivedCursor`): reading every call on every poll grew with the
    calls and slowed the receiver that records them."""
    cursor = ReceivedCursor(stack.receiver_url, path_prefix=path)
    ids: list[int] = []
    distinct: set[int] = set()
    last_new = time.monotonic()
    while True:
        fresh = [json.loads(r["body"])["id"] for r in cursor.fetch_new()]
        now = time.monotonic()
        if fresh:
            ids.extend(fresh)
            distinct.update(fresh)
            last_new = now
        elif len(distinct) >= count and now - last_new >= 3:
            return ids
        if now - last_new > stall_timeout:
            return ids
        time.sleep(0.5)


def _bigtable_cells(project: str, name: str) -> Readback:
    from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        client = BigtableDataClient(project=project)
    ids: list[int] = []
    writes: list[int] = []
    try:
        for p in PARITIES:
            for row in client.get_table(name, p).read_rows(ReadRowsQuery()):
                key = int(row.row_key)
                for cell in row.cells:
                    (ids if cell.family == "m" else writes).append(key)
    finally:
        client.close()
    return Readback(ids, writes)


# -- does the emulator keep its data across a restart? -------------------------------------


@dataclass
class RestartProbe:
    """What restarting a service's emulator did to a resource created before it."""

    service: str
    survives: bool
    detail: str
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def probe_restart(service: str, project: str, stack: EmulatorStack) -> RestartProbe:
    """Creates a resource, restarts the emulator (same ports), and looks for the resource.

    The emulator restart fault only makes sense where the emulator keeps its data: an empty
    emulator after a restart loses what was written before it, which says nothing about the
    sink.
    """
    name = run_name()
    create, exists = _probes(service, project, name)
    create()
    started = time.monotonic()
    stack.restart(service)
    took = time.monotonic() - started
    try:
        kept = exists()
        detail = "kept" if kept else "gone"
    except Exception as err:  # noqa: BLE001 - any client error means the resource is unusable
        kept, detail = False, f"gone ({type(err).__name__})"
    what = {
        "pubsub": "topic",
        "bigquery": "dataset",
        "gcs": "bucket",
        "cloudtasks": "queue",
        "bigtable": "table",
        "spanner": "table",
    }[service]
    return RestartProbe(service, kept, f"a {what} created before the restart: {detail}", took)


def _probes(service: str, project: str, name: str) -> tuple[Callable[[], Any], Callable[[], bool]]:
    if service == "pubsub":
        from google.cloud import pubsub_v1

        topic = f"projects/{project}/topics/{name}"
        return (
            lambda: pubsub_v1.PublisherClient().create_topic(name=topic),
            lambda: bool(pubsub_v1.PublisherClient().get_topic(topic=topic)),
        )
    if service == "bigquery":
        return (
            lambda: _bigquery(project).create_dataset(f"{project}.{name}"),
            lambda: bool(_bigquery(project).get_dataset(f"{project}.{name}")),
        )
    if service == "gcs":
        return (
            lambda: _storage(project).create_bucket(name),
            lambda: _storage(project).lookup_bucket(name) is not None,
        )
    if service == "cloudtasks":
        from google.cloud import tasks_v2

        parent = f"projects/{project}/locations/{LOCATION}"
        queue = f"{parent}/queues/{name}"
        return (
            lambda: _tasks().create_queue(parent=parent, queue=tasks_v2.Queue(name=queue)),
            lambda: bool(_tasks().get_queue(name=queue)),
        )
    if service == "bigtable":
        return (
            lambda: _bigtable_admin(project, name).table("t").create(column_families={"m": None}),
            lambda: bool(_bigtable_admin(project, name).table("t").exists()),
        )
    if service == "spanner":
        ddl = f"CREATE TABLE {name} (id INT64 NOT NULL) PRIMARY KEY (id)"

        def spanner_exists() -> bool:
            with _spanner(project).snapshot() as snapshot:
                list(snapshot.execute_sql(f"SELECT COUNT(*) FROM {name}"))
            return True

        return (lambda: _spanner(project).update_ddl([ddl]).result(300), spanner_exists)
    raise ValueError(service)
