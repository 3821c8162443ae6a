"""How each emulator of the local stack is launched: its command, ports, readiness probe and
the variables that point clients at it.

One method per service (``_start_pubsub``, ``_start_bigquery``, ...) starts that emulator on
its ports, waits until it answers a real request, sets up what it needs (the Spanner instance
and database, the GCS object directory the BigQuery emulator loads ``gs://`` files from) and
returns the environment variables that point the client libraries and the sinks at it. They are
a mixin of :class:`~pyflink_gcp.tools.emulators.stack.EmulatorStack` and apart from it because
they are per-service recipes, each changed when an emulator changes, while the stack's
orchestration (start in parallel, restart on the same ports, stop every process group, clean
up at exit) is the same for all of them.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyflink_gcp.tools.emulators.processes import (
    LOOPBACK,
    EmulatorError,
    EmulatorStartError,
    ManagedProcess,
    free_port,
    grpc_ready,
    http_json,
    http_ready,
    tcp_open,
    wait_until,
)
from pyflink_gcp.tools.emulators.receiver import Receiver
from pyflink_gcp.tools.emulators.tools import Tools


class EmulatorLaunchers:
    """The per-service starters of :class:`~pyflink_gcp.tools.emulators.stack.EmulatorStack`,
    whose settings and state they use; each runs in a thread of its own."""

    project: str
    spanner_instance: str
    spanner_database: str
    start_timeout: float
    _data: Path
    _ports: dict[str, list[int]]
    _receiver: Receiver | None
    _lock: threading.Lock
    _stopping: bool
    _tools: Tools | None

    def _spawn(
        self,
        name: str,
        argv: list[str],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        """Start ``argv`` as the stack's process ``name`` (the stack starts and tracks it)."""
        raise NotImplementedError

    def _gcloud(self, name: str, args: list[str]) -> ManagedProcess:
        assert self._tools is not None and self._tools.gcloud is not None
        # One config directory per emulator: concurrent gcloud runs must not share one.
        config = self._data / f"gcloud-config-{name}"
        config.mkdir(parents=True, exist_ok=True)
        return self._spawn(
            name,
            [self._tools.gcloud, *args],
            extra_env={
                "CLOUDSDK_CONFIG": str(config),
                "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
                "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
                "CLOUDSDK_CORE_PROJECT": self.project,
            },
        )

    def _wait(self, name: str, process: ManagedProcess, probe: Callable[[], object]) -> None:
        wait_until(probe, timeout=self.start_timeout, what=f"{name} emulator", process=process)
        process.note_servers()

    def _port(self, name: str, index: int = 0) -> int:
        """A free port for ``name``, and the same one again when it restarts."""
        ports = self._ports.setdefault(name, [])
        while len(ports) <= index:
            ports.append(free_port())
        return ports[index]

    def _starters(self) -> dict[str, Callable[[], dict[str, str]]]:
        return {
            "pubsub": self._start_pubsub,
            "bigtable": self._start_bigtable,
            "spanner": self._start_spanner,
            "bigquery": self._start_bigquery,
            "cloudtasks": self._start_cloudtasks,
            "gcs": self._start_gcs,
            "receiver": self._start_receiver,
        }

    def _start_pubsub(self) -> dict[str, str]:
        port = self._port("pubsub")
        data_dir = self._data / "pubsub-data"
        data_dir.mkdir(parents=True, exist_ok=True)  # the emulator requires it to exist
        process = self._gcloud(
            "pubsub",
            [
                "beta",
                "emulators",
                "pubsub",
                "start",
                f"--host-port={LOOPBACK}:{port}",
                f"--project={self.project}",
                f"--data-dir={data_dir}",
            ],
        )
        self._wait(
            "pubsub",
            process,
            grpc_ready(port, "/google.pubsub.v1.Publisher/ListTopics", f"projects/{self.project}"),
        )
        return {"PUBSUB_EMULATOR_HOST": f"{LOOPBACK}:{port}"}

    def _start_bigtable(self) -> dict[str, str]:
        port = self._port("bigtable")
        process = self._gcloud(
            "bigtable",
            ["beta", "emulators", "bigtable", "start", f"--host-port={LOOPBACK}:{port}"],
        )
        self._wait(
            "bigtable",
            process,
            grpc_ready(
                port,
                "/google.bigtable.admin.v2.BigtableTableAdmin/ListTables",
                f"projects/{self.project}/instances/probe",
            ),
        )
        return {"BIGTABLE_EMULATOR_HOST": f"{LOOPBACK}:{port}"}

    def _start_spanner(self) -> dict[str, str]:
        port, rest_port = self._port("spanner"), self._port("spanner", 1)
        process = self._gcloud(
            "spanner",
            [
                "emulators",
                "spanner",
                "start",
                f"--host-port={LOOPBACK}:{port}",
                f"--rest-port={rest_port}",
            ],
        )
        rest = f"http://{LOOPBACK}:{rest_port}/v1"
        project = f"projects/{self.project}"
        self._wait(
            "spanner",
            process,
            http_ready(f"{rest}/{project}/instanceConfigs", port, rest_port),
        )
        # Created through the REST gateway so that the stack needs no Spanner client.
        instance = f"{project}/instances/{self.spanner_instance}"
        self._spanner_call(
            process,
            rest,
            f"{project}/instances",
            {
                "instanceId": self.spanner_instance,
                "instance": {
                    "config": f"{project}/instanceConfigs/emulator-config",
                    "displayName": self.spanner_instance,
                    "nodeCount": 1,
                },
            },
        )
        self._spanner_call(
            process,
            rest,
            f"{instance}/databases",
            {"createStatement": f"CREATE DATABASE `{self.spanner_database}`"},
        )
        return {
            "SPANNER_EMULATOR_HOST": f"{LOOPBACK}:{port}",
            "SPANNER_INSTANCE": self.spanner_instance,
            "SPANNER_DATABASE": self.spanner_database,
        }

    def _spanner_call(
        self, process: ManagedProcess, rest: str, path: str, body: dict[str, Any]
    ) -> None:
        """POSTs a Spanner admin request and waits for its long-running operation."""
        status, operation = http_json("POST", f"{rest}/{path}", body, timeout=30.0)
        if status != 200 or not isinstance(operation, dict):
            raise EmulatorStartError(
                f"spanner emulator: POST {path} answered {status}: {operation}. "
                f"Log {process.log_path}:\n{process.log_tail()}"
            )

        def done() -> dict[str, Any] | None:
            nonlocal operation
            if not operation.get("done"):
                _, operation = http_json("GET", f"{rest}/{operation['name']}")
            return operation if operation.get("done") else None

        result = wait_until(
            done, timeout=self.start_timeout, what=f"spanner {path}", process=process
        )
        if "error" in result:
            raise EmulatorStartError(f"spanner emulator: {path} failed: {result['error']}")

    def _start_bigquery(self) -> dict[str, str]:
        assert self._tools is not None
        rest_port, grpc_port = self._port("bigquery"), self._port("bigquery", 1)
        # Started through a launcher that serialises the emulator's use of its single DuckDB
        # connection (see bq_serialized.py), with the emulator's own interpreter.
        python = Path(self._tools.bqemulator).parent / "python"
        launcher = Path(__file__).with_name("bq_serialized.py")
        process = self._spawn(
            "bigquery",
            [
                str(python),
                str(launcher),
                "start",
                "--rest-host",
                LOOPBACK,
                "--rest-port",
                str(rest_port),
                "--grpc-host",
                LOOPBACK,
                "--grpc-port",
                str(grpc_port),
                "--project",
                self.project,
                "--ephemeral",
            ],
            extra_env={
                # The DuckDB extensions were installed offline under this HOME.
                "HOME": str(self._tools.duckdb_home),
                # Snapshots for time travel cost O(table size) on every append.
                "BQEMU_TIME_TRAVEL_RETENTION_DAYS": "0",
                "BQEMU_GCS_LOCAL_ROOT": str(self._gcs_objects_dir()),
            },
        )
        self._wait(
            "bigquery",
            process,
            http_ready(
                f"http://{LOOPBACK}:{rest_port}/bigquery/v2/projects/{self.project}/datasets",
                rest_port,
                grpc_port,
            ),
        )
        return {
            "BIGQUERY_EMULATOR_HOST": f"{LOOPBACK}:{rest_port}",
            "BIGQUERY_STORAGE_EMULATOR_HOST": f"{LOOPBACK}:{grpc_port}",
        }

    def _gcs_data_dir(self) -> Path:
        return self._data / "gcs-data"

    def _gcs_objects_dir(self) -> Path:
        """Where the GCS emulator keeps object bytes, as ``<bucket>/<object name>``.

        gcp-storage-emulator stores ``<data dir>/.cloudstorage/<bucket>/<name>`` and
        bqemulator resolves ``gs://<bucket>/<name>`` to ``<BQEMU_GCS_LOCAL_ROOT>/<bucket>/<name>``,
        so pointing the latter at the former makes a ``gs://`` load job read what was
        uploaded to the GCS emulator.
        """
        objects = self._gcs_data_dir() / ".cloudstorage"
        objects.mkdir(parents=True, exist_ok=True)
        return objects

    def _start_gcs(self) -> dict[str, str]:
        assert self._tools is not None
        port = self._port("gcs")
        self._gcs_objects_dir()
        # Through a launcher that lets connections queue (see gcs_queued.py), with the
        # emulator's own interpreter.
        python = Path(self._tools.gcs_emulator).parent / "python"
        process = self._spawn(
            "gcs",
            [
                str(python),
                str(Path(__file__).with_name("gcs_queued.py")),
                "--data-dir",
                str(self._gcs_data_dir()),
                "start",
                f"--host={LOOPBACK}",
                f"--port={port}",
            ],
        )
        query = urllib.parse.urlencode({"project": self.project})
        self._wait(
            "gcs",
            process,
            http_ready(f"http://{LOOPBACK}:{port}/storage/v1/b?{query}", port),
        )
        return {"STORAGE_EMULATOR_HOST": f"http://{LOOPBACK}:{port}"}

    def _start_cloudtasks(self) -> dict[str, str]:
        assert self._tools is not None
        port = self._port("cloudtasks")
        process = self._spawn(
            "cloudtasks",
            [str(self._tools.cloud_tasks_binary), "-host", LOOPBACK, "-port", str(port)],
        )
        self._wait(
            "cloudtasks",
            process,
            grpc_ready(
                port,
                "/google.cloud.tasks.v2.CloudTasks/ListQueues",
                f"projects/{self.project}/locations/us-central1",
            ),
        )
        return {"CLOUD_TASKS_EMULATOR_HOST": f"{LOOPBACK}:{port}"}

    def _start_receiver(self) -> dict[str, str]:
        with self._lock:
            if self._stopping:
                raise EmulatorError("receiver: the stack is stopping")
            self._receiver = Receiver().start()
        url = self._receiver.url
        wait_until(
            lambda: tcp_open(LOOPBACK, int(url.rsplit(":", 1)[1])), timeout=5, what="receiver"
        )
        return {"PYFLINK_GCP_RECEIVER_URL": url}
