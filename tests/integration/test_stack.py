"""The emulator stack against the real client libraries, one round trip per service."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials

from pyflink_gcp.tools.emulators import EmulatorStack, fetch_received
from pyflink_gcp.tools.emulators.processes import group_members

pytestmark = pytest.mark.integration


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


def _bigquery_client(stack: EmulatorStack) -> Any:
    from google.cloud import bigquery

    return bigquery.Client(
        project=stack.project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint="http://" + stack.env["BIGQUERY_EMULATOR_HOST"]),
    )


def test_env_has_exactly_the_documented_variables(stack: EmulatorStack) -> None:
    assert set(stack.env) == {
        "PUBSUB_EMULATOR_HOST",
        "BIGTABLE_EMULATOR_HOST",
        "SPANNER_EMULATOR_HOST",
        "BIGQUERY_EMULATOR_HOST",
        "BIGQUERY_STORAGE_EMULATOR_HOST",
        "CLOUD_TASKS_EMULATOR_HOST",
        "STORAGE_EMULATOR_HOST",
        "PYFLINK_GCP_RECEIVER_URL",
        "GOOGLE_CLOUD_PROJECT",
        "SPANNER_INSTANCE",
        "SPANNER_DATABASE",
    }
    for name, value in stack.env.items():
        assert os.environ[name] == value
        if name.endswith("_HOST") and name != "STORAGE_EMULATOR_HOST":
            assert value.startswith("127.0.0.1:"), (name, value)
    assert stack.env["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
    assert stack.env["PYFLINK_GCP_RECEIVER_URL"] == stack.receiver_url
    assert (stack.spanner_instance, stack.spanner_database) == ("test-instance", "test-db")
    assert {p.name for p in stack.log_dir.iterdir()} >= {"pubsub.log", "bigquery.log"}


def test_pubsub_publish_and_pull(stack: EmulatorStack) -> None:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(stack.project, f"stack-topic-{_suffix()}")
    subscription = subscriber.subscription_path(stack.project, f"stack-sub-{_suffix()}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)

    publisher.publish(topic, b"hello pubsub", origin="test").result(timeout=30)

    deadline = time.monotonic() + 30
    received: list[Any] = []
    while not received and time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        received.extend(response.received_messages)
    assert [m.message.data for m in received] == [b"hello pubsub"]
    assert received[0].message.attributes["origin"] == "test"
    subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in received])
    subscriber.close()


def test_bigtable_write_and_read(stack: EmulatorStack) -> None:
    from google.cloud.bigtable import Client, column_family

    client = Client(project=stack.project, admin=True)
    table = client.instance("test-instance").table(f"stack-table-{_suffix()}")
    table.create(column_families={"cf": column_family.MaxVersionsGCRule(1)})

    row = table.direct_row(b"row-1")
    row.set_cell("cf", b"col", b"value-1")
    row.commit()

    read = table.read_row(b"row-1")
    assert read is not None
    assert read.cells["cf"][b"col"][0].value == b"value-1"


def test_spanner_ddl_insert_query(stack: EmulatorStack) -> None:
    from google.cloud import spanner

    client = spanner.Client(project=stack.project)
    database = client.instance(stack.spanner_instance).database(stack.spanner_database)
    table = f"StackTest_{_suffix()}"
    database.update_ddl(
        [f"CREATE TABLE {table} (Id INT64 NOT NULL, Name STRING(64)) PRIMARY KEY (Id)"]
    ).result(timeout=60)

    with database.batch() as batch:
        batch.insert(table=table, columns=("Id", "Name"), values=[(1, "one"), (2, "two")])

    with database.snapshot() as snapshot:
        rows = list(snapshot.execute_sql(f"SELECT Id, Name FROM {table} ORDER BY Id"))
    assert rows == [[1, "one"], [2, "two"]]


def _descriptor_for(table: Any) -> Any:
    """Builds a proto2 DescriptorProto matching a BigQuery table schema at runtime."""
    from google.protobuf import descriptor_pb2

    types = {
        "INTEGER": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
        "INT64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
        "STRING": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        "FLOAT": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
        "FLOAT64": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
        "BOOLEAN": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
        "BOOL": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    }
    message = descriptor_pb2.DescriptorProto(name="Row")
    for number, field in enumerate(table.schema, start=1):
        message.field.add(
            name=field.name,
            number=number,
            type=types[field.field_type],
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    return message


def _message_class(descriptor_proto: Any) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"row_{_suffix()}.proto", package=f"stacktest{_suffix()}", syntax="proto2"
    )
    file_proto.message_type.add().CopyFrom(descriptor_proto)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    descriptor = pool.FindMessageTypeByName(f"{file_proto.package}.{descriptor_proto.name}")
    return message_factory.GetMessageClass(descriptor)


def test_bigquery_storage_write_default_stream(stack: EmulatorStack) -> None:
    from google.cloud import bigquery
    from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    bq = _bigquery_client(stack)
    dataset = bq.create_dataset(f"stack_{_suffix()}")
    table = bq.create_table(
        bigquery.Table(
            f"{stack.project}.{dataset.dataset_id}.events",
            schema=[
                bigquery.SchemaField("id", "INT64"),
                bigquery.SchemaField("name", "STRING"),
                bigquery.SchemaField("score", "FLOAT64"),
            ],
        )
    )
    table = bq.get_table(table)

    descriptor_proto = _descriptor_for(table)
    row_class = _message_class(descriptor_proto)
    stream = (
        f"projects/{stack.project}/datasets/{dataset.dataset_id}/tables/events/streams/_default"
    )
    schema = types.ProtoSchema(proto_descriptor=descriptor_proto)

    def request(rows: list[dict[str, Any]]) -> types.AppendRowsRequest:
        # Every request names the stream and the schema: the emulator needs both.
        return types.AppendRowsRequest(
            write_stream=stream,
            proto_rows=types.AppendRowsRequest.ProtoData(
                writer_schema=schema,
                rows=types.ProtoRows(
                    serialized_rows=[row_class(**r).SerializeToString() for r in rows]
                ),
            ),
        )

    writer = BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(
            channel=grpc.insecure_channel(stack.env["BIGQUERY_STORAGE_EMULATOR_HOST"])
        )
    )
    responses = list(
        writer.append_rows(
            iter(
                [
                    request([{"id": 1, "name": "one", "score": 1.5}]),
                    request([{"id": 2, "name": "two", "score": 2.5}, {"id": 3, "name": "three"}]),
                ]
            )
        )
    )
    assert len(responses) == 2
    assert all(not r.error.code for r in responses)

    rows = bq.query(
        f"SELECT id, name, score FROM `{stack.project}.{dataset.dataset_id}.events` ORDER BY id"
    ).result()
    assert [tuple(r.values()) for r in rows] == [
        (1, "one", 1.5),
        (2, "two", 2.5),
        (3, "three", None),
    ]


def test_cloud_tasks_dispatches_to_receiver(stack: EmulatorStack) -> None:
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    stack.clear_received()
    client = tasks_v2.CloudTasksClient(
        transport=CloudTasksGrpcTransport(
            channel=grpc.insecure_channel(stack.env["CLOUD_TASKS_EMULATOR_HOST"])
        )
    )
    parent = f"projects/{stack.project}/locations/us-central1"
    queue = client.create_queue(
        parent=parent, queue=tasks_v2.Queue(name=f"{parent}/queues/stack-{_suffix()}")
    )
    path = f"/tasks/{_suffix()}"
    client.create_task(
        parent=queue.name,
        task=tasks_v2.Task(
            http_request=tasks_v2.HttpRequest(
                url=stack.receiver_url + path,
                http_method=tasks_v2.HttpMethod.POST,
                headers={"X-Stack-Test": "yes", "Content-Type": "application/json"},
                body=b'{"hello": "tasks"}',
            )
        ),
    )

    deadline = time.monotonic() + 15
    arrived: list[dict[str, Any]] = []
    while not arrived and time.monotonic() < deadline:
        arrived = [r for r in stack.received() if r["path"] == path]
        time.sleep(0.1)
    assert arrived, f"nothing reached the receiver; got {stack.received()}"
    request = arrived[0]
    assert request["method"] == "POST"
    assert request["body"] == b'{"hello": "tasks"}'
    assert request["headers"]["x-stack-test"] == "yes"
    assert request["headers"]["x-cloudtasks-queuename"] == queue.name.rsplit("/", 1)[1]

    # The same record is visible to another process through the inspection endpoint.
    remote = [r for r in fetch_received(stack.receiver_url) if r["path"] == path]
    assert remote == arrived[:1]


def test_gcs_object_loads_into_bigquery(stack: EmulatorStack) -> None:
    from google.cloud import bigquery, storage  # type: ignore[attr-defined]

    gcs = storage.Client(
        project=stack.project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": stack.env["STORAGE_EMULATOR_HOST"]},
    )
    bucket = gcs.create_bucket(f"stack-bucket-{_suffix()}")
    rows = [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}]
    bucket.blob("load/rows.json").upload_from_string(
        "\n".join(json.dumps(r) for r in rows) + "\n", content_type="application/json"
    )

    bq = _bigquery_client(stack)
    dataset = bq.create_dataset(f"stack_load_{_suffix()}")
    table_id = f"{stack.project}.{dataset.dataset_id}.loaded"
    job = bq.load_table_from_uri(
        f"gs://{bucket.name}/load/rows.json",
        table_id,
        job_config=bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.NEWLINE_DELIMITED_JSON,
            schema=[
                bigquery.SchemaField("id", "INT64"),
                bigquery.SchemaField("name", "STRING"),
            ],
        ),
    )
    job.result(timeout=60)

    result = bq.query(f"SELECT id, name FROM `{table_id}` ORDER BY id").result()
    assert [dict(r.items()) for r in result] == rows


def _live(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    small = EmulatorStack(services=("bigtable",), log_dir=tmp_path / "logs")
    with small:
        process = small.processes["bigtable"]
        port = int(small.env["BIGTABLE_EMULATOR_HOST"].rsplit(":", 1)[1])
        # gcloud runs the real emulator as a child: the group has more than one member.
        members = group_members(process.pgid)
        assert process.pid in members
        assert len(members) >= 2, members
        assert "GOOGLE_CLOUD_PROJECT" in small.env
        assert "SPANNER_INSTANCE" not in small.env
    assert group_members(process.pgid) == []
    assert not any(_live(pid) for pid in members)
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    # The log survives the stop, for post-mortems.
    assert (small.log_dir / "bigtable.log").read_text()


def test_emulators_of_a_killed_process_are_stopped_by_the_reaper(tmp_path: Path) -> None:
    """SIGKILL leaves no atexit or signal handler to run: the stack's reaper stops its groups."""
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from pyflink_gcp.tools.emulators import EmulatorStack\n"
        "stack = EmulatorStack(services=('bigtable',), keep_logs=False).start()\n"
        "print(stack.processes['bigtable'].pgid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=str(tmp_path)
    )
    try:
        assert owner.stdout is not None
        pgid = int(owner.stdout.readline())
        members = group_members(pgid)
        assert len(members) >= 2, members
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 15
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert group_members(pgid) == []
        assert not any(_live(pid) for pid in members)
    finally:
        if owner.poll() is None:
            owner.kill()


def _children(pid: int) -> dict[int, str]:
    """The live direct children of ``pid`` and their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found[int(entry.name)] = cmdline
    return found


def test_up_reports_a_killed_emulator_and_restarts_it_on_the_same_port(tmp_path: Path) -> None:
    """A SIGKILLed emulator is reported as killed by signal 9, and `restart` brings it back."""
    import queue
    import signal
    import subprocess
    import sys
    import threading

    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    cli = [sys.executable, "-m", "pyflink_gcp.cli", "emulators"]
    up = subprocess.Popen(
        [*cli, "up", "--services", "cloudtasks"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    lines: queue.Queue[str] = queue.Queue()
    assert up.stdout is not None and up.stderr is not None
    threading.Thread(target=lambda: [lines.put(x) for x in up.stderr], daemon=True).start()

    def wait_for(text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if text in line:
                return line
        raise AssertionError(f"no stderr line with {text!r} within {timeout} s")

    try:
        exports = {}
        for line in up.stdout:
            name, _, value = line.removeprefix("export ").strip().partition("=")
            exports[name] = value
            if name == "PYFLINK_GCP_RECEIVER_URL" or len(exports) == 2:
                break
        host = exports["CLOUD_TASKS_EMULATOR_HOST"]
        wait_for("restarts one")
        emulator = [p for p, cmd in _children(up.pid).items() if "cloud-tasks-emulator" in cmd]
        assert len(emulator) == 1, _children(up.pid)
        os.kill(emulator[0], signal.SIGKILL)
        report = wait_for("the cloudtasks emulator")
        assert "was killed by signal SIGKILL (9)" in report, report
        assert "code 0" not in report

        restart = subprocess.run(
            [*cli, "restart", "cloudtasks", "--pid", str(up.pid), "--timeout", "60"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert restart.returncode == 0, restart.stderr
        assert "ok: cloudtasks restarted" in restart.stdout

        # The same exported endpoint answers again, through the real client library.
        client = tasks_v2.CloudTasksClient(
            transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(host))
        )
        parent = "projects/test-project/locations/us-central1"
        queue_name = f"{parent}/queues/restarted-{_suffix()}"
        client.create_queue(parent=parent, queue={"name": queue_name}, timeout=10)
        assert queue_name in [q.name for q in client.list_queues(parent=parent, timeout=10)]

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
