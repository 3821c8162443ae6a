"""User activity into Spanner: events, audit events and a per-user row, in shared commits.

A PyFlink job reads a stream of user events and writes them to one Spanner database with
``SpannerSink``. The serializer decides the table per record: security-relevant events
(``login``, ``role_change``) go to ``AuditEvents``, everything else to ``Events``; every event
also upserts the user's row in ``Users``; heartbeats are skipped; an ``erase_user`` event
deletes the user's row. The mutations of all three tables share commits, each kept under
Spanner's mutation limit as Spanner counts it (columns plus index entries: ``Events`` has a
secondary index). Every mutation is an insert-or-update or a delete, so the replay after a
failure converges to the same rows. Grouping is on (``--grouping-factor``, 1 turns it off): each
subtask sorts a group of commits' worth of mutations by table and key before cutting commits.

Run it with ``python examples/spanner_events.py``. It uses the Spanner emulator named by
``SPANNER_EMULATOR_HOST`` (with ``SPANNER_INSTANCE`` and ``SPANNER_DATABASE``), or starts one
for the run. Against real Spanner, drop the variable and pass ``--project``, ``--instance`` and
``--database`` of an existing database: the sink then uses Application Default Credentials.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import warnings
from typing import Any

from pyflink_gcp import FailureHandler
from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink, SpannerWriterOptions
from pyflink_gcp.tools.emulators import emulators_for

USERS = 500
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
AUDITED = ("login", "role_change")

DDL = [
    "CREATE TABLE IF NOT EXISTS Events (event_id INT64 NOT NULL, user_id STRING(36) NOT NULL,"
    " kind STRING(32) NOT NULL, event_time TIMESTAMP NOT NULL, payload JSON) PRIMARY KEY (event_id)",
    "CREATE INDEX IF NOT EXISTS EventsByUser ON Events(user_id, event_time)",
    "CREATE TABLE IF NOT EXISTS AuditEvents (event_id INT64 NOT NULL,"
    " user_id STRING(36) NOT NULL, action STRING(32) NOT NULL, event_time TIMESTAMP NOT NULL)"
    " PRIMARY KEY (event_id)",
    "CREATE TABLE IF NOT EXISTS Users (user_id STRING(36) NOT NULL, last_kind STRING(32),"
    " last_seen TIMESTAMP) PRIMARY KEY (user_id)",
]


def user_event(i: int) -> dict[str, Any]:
    """The i-th event: users act in turn, one event every 100 ms of event time."""
    r = (i * 7919) % 100
    if i % 997 == 996:
        kind = "erase_user"
    elif r < 5:
        kind = "heartbeat"
    elif r < 8:
        kind = "login"
    elif r < 9:
        kind = "role_change"
    elif r < 40:
        kind = "click"
    else:
        kind = "page_view"
    return {
        "id": i,
        "user": f"user-{i % USERS:04d}",
        "kind": kind,
        "at": START + datetime.timedelta(milliseconds=100 * i),
        "page": f"/p/{i % 37}",
    }


def to_mutations(event: dict[str, Any], context: Any) -> list[Mutation] | None:
    """The serializer: the table is chosen per record; None skips it."""
    kind, user, at = event["kind"], event["user"], event["at"]
    if kind == "heartbeat":
        return None
    if kind == "erase_user":
        return [
            Mutation.delete("Users", user),
            Mutation.insert_or_update(
                "AuditEvents",
                {"event_id": event["id"], "user_id": user, "action": kind, "event_time": at},
            ),
        ]
    last_seen = Mutation.insert_or_update(
        "Users", {"user_id": user, "last_kind": kind, "last_seen": at}
    )
    if kind in AUDITED:
        row = {"event_id": event["id"], "user_id": user, "action": kind, "event_time": at}
        return [Mutation.insert_or_update("AuditEvents", row), last_seen]
    row = {
        "event_id": event["id"],
        "user_id": user,
        "kind": kind,
        "event_time": at,
        "payload": {"page": event["page"]},
    }
    return [Mutation.insert_or_update("Events", row), last_seen]


def user_of(event: dict[str, Any]) -> str:
    return str(event["user"])


def database(destination: DatabaseDestination) -> Any:
    """A client ``Database`` for the DDL and the read-back."""
    from google.cloud import spanner

    client = spanner.Client(project=destination.project, disable_builtin_metrics=True)
    return client.instance(destination.instance).database(destination.database)


def writer_options(grouping_factor: int) -> SpannerWriterOptions:
    """How each subtask cuts its mutations into commits.

    Events arrive in time order: a commit filled in arrival order mixes three tables and
    upserts ``Users`` rows from all over that table's key space (500 users in turn), so it
    touches many of Spanner's splits. With a grouping factor above 1 the writer buffers that
    many commits' worth, sorts it by table and primary key and cuts commits from the sorted
    run, so each commit touches fewer splits: worth it for bulk loads, backfills and streams
    keyed by something other than the table's key. The mutations of one row keep their order
    (a user's upserts, then its delete); different rows may apply in another order than they
    arrived, so leave grouping off where one row's write must land before another's.
    ``max_rows_per_commit`` bounds the commits cut from a group (Apache Beam's SpannerIO uses
    500), and ``max_commit_delay`` lets Spanner hold a commit briefly to apply it with others
    (throughput for a little latency).
    """
    builder = SpannerWriterOptions.builder().max_mutations_per_commit(20_000)
    if grouping_factor > 1:
        builder = (
            builder.grouping_factor(grouping_factor)
            .max_rows_per_commit(500)
            .max_commit_delay(datetime.timedelta(milliseconds=50))
        )
    return builder.build()


def run_job(
    destination: DatabaseDestination, count: int, parallelism: int = 2, grouping_factor: int = 10
) -> None:
    from pyflink.common import Configuration
    from pyflink.common.watermark_strategy import WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    conf = Configuration()
    # The Python workers must run this interpreter (the one with pyflink-gcp installed).
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp), whether
    # or not the venv is activated; otherwise Flink starts the `python` on the PATH.
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1_000)

    sink = (
        SpannerSink.builder()
        .set_sink_name("user-activity")
        .set_database(destination)
        .set_serializer(to_mutations)
        .set_writer_options(writer_options(grouping_factor))
        .set_failure_handler(FailureHandler.fail_job())
        .build()
    )
    # One reader keeps each user's events in order; key_by keeps a user on one sink subtask,
    # so a user's upserts and its erase apply in the order they happened.
    (
        env.from_source(NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "n")
        .set_parallelism(1)
        .map(user_event)
        .set_parallelism(1)
        .key_by(user_of)
        .sink_to(sink)
    )
    env.execute("spanner-user-activity")


def expected(count: int) -> dict[str, int]:
    """What the tables must hold after the job, computed without Spanner."""
    events = audit = 0
    users: dict[str, bool] = {}
    for i in range(count):
        e = user_event(i)
        if e["kind"] == "heartbeat":
            continue
        if e["kind"] == "erase_user":
            users[e["user"]] = False
            audit += 1
        else:
            users[e["user"]] = True
            if e["kind"] in AUDITED:
                audit += 1
            else:
                events += 1
    return {"Events": events, "AuditEvents": audit, "Users": sum(users.values())}


def summarize(destination: DatabaseDestination) -> dict[str, int]:
    db = database(destination)
    counts: dict[str, int] = {}
    for table in ("Events", "AuditEvents", "Users"):
        with db.snapshot() as snapshot:
            counts[table] = list(snapshot.execute_sql(f"SELECT COUNT(*) FROM {table}"))[0][0]
    with db.snapshot() as snapshot:
        busiest = list(
            snapshot.execute_sql(
                "SELECT user_id, COUNT(*) AS n FROM Events@{FORCE_INDEX=EventsByUser} "
                "GROUP BY user_id ORDER BY n DESC, user_id LIMIT 3"
            )
        )
    for table, n in counts.items():
        print(f"  {table:<12} {n:7d} rows")
    print("  busiest users:", ", ".join(f"{u} ({n} events)" for u, n in busiest))
    return counts


def grouping_factor(text: str) -> int:
    """``--grouping-factor``: an integer of at least 1 (1 turns grouping off, 0 is refused so a
    typo does not turn it off silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (1: grouping off), got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "test-project"))
    parser.add_argument("--instance", default=None, help="default: $SPANNER_INSTANCE")
    parser.add_argument("--database", default=None, help="default: $SPANNER_DATABASE")
    parser.add_argument("--count", type=int, default=10_000, help="events")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--grouping-factor",
        type=grouping_factor,
        default=10,
        help="commits' worth sorted by key, at least 1 (1: grouping off; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    with emulators_for(("spanner",), "SPANNER_EMULATOR_HOST", project=args.project):
        destination = DatabaseDestination.of(
            args.project,
            args.instance or os.environ.get("SPANNER_INSTANCE", "test-instance"),
            args.database or os.environ.get("SPANNER_DATABASE", "test-db"),
        )
        db = database(destination)
        db.update_ddl(DDL).result(300)
        for table in ("Events", "AuditEvents", "Users"):  # a fresh run on a reused database
            db.execute_partitioned_dml(f"DELETE FROM {table} WHERE true")
        started = time.monotonic()
        run_job(destination, args.count, args.parallelism, args.grouping_factor)
        print(
            f"wrote {args.count} events to {destination} "
            f"in {time.monotonic() - started:.1f}s (including job startup):"
        )
        counts = summarize(destination)
    want = expected(args.count)
    if counts != want:
        print(f"expected {want}")
        return 1
    print("every table holds exactly the expected rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
