"""A standalone Flink cluster on this machine, started from the apache-flink wheel's scripts.

:class:`StandaloneCluster` runs one JobManager and N TaskManagers as separate processes
(``jobmanager.sh start-foreground``, ``taskmanager.sh start-foreground``: the scripts ``exec``
the JVM, so each JVM is a child of this process and leads a process group of its own, with the
Python workers it starts). Jobs go in through the wheel's ``bin/flink run -py``, as a cluster
user submits them, which is what the MiniCluster every other test uses cannot show: the job
graph crossing process boundaries, the bridge jar travelling through the blob server, the
Python workers started by another JVM, a TaskManager dying with its workers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from pyflink_gcp.tools.cluster.config import (
    ClusterError,
    ClusterLayout,
    ClusterPorts,
    ClusterSettings,
    cluster_config,
    flink_home,
    process_env,
    write_conf_dir,
)
from pyflink_gcp.tools.cluster.members import (
    TERMINAL_STATES,
    Slots,
    Submission,
    TaskManager,
    free_slots,
)
from pyflink_gcp.tools.emulators.processes import (
    LOOPBACK,
    EmulatorError,
    GroupReaper,
    ManagedProcess,
    group_members,
    http_json,
    wait_until,
)

__all__ = [
    "TERMINAL_STATES",
    "Slots",
    "StandaloneCluster",
    "Submission",
    "TaskManager",
    "free_slots",
]

#: What ``flink run`` prints once the JobManager accepted a job.
_JOB_ID = re.compile(r"Job has been submitted with JobID ([0-9a-f]{32})")

_live_lock = threading.Lock()
_live: set[StandaloneCluster] = set()


def _stop_live() -> None:
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop()


atexit.register(_stop_live)


class StandaloneCluster:
    """A JobManager and TaskManagers from the wheel's ``pyflink/bin/``, stopped on exit.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`)::

        with StandaloneCluster(env=stack.env) as cluster:
            done = cluster.submit("examples/pubsub_dynamic_topics.py", "--parallelism", "4")
            assert done.ok, done.output

    Every process is started in a session of its own and stopped by signalling its whole
    process group, so a TaskManager's Python workers go with it. A watchdog process stops the
    groups should this process die without stopping them (SIGKILL, ``os._exit``); atexit
    covers an ordinary exit that skipped :meth:`stop`.

    Attributes:
        settings: What the cluster is made of.
        layout: Its directories (configuration, logs, pid files, checkpoints, temporary).
        home: The wheel's ``pyflink/`` directory (FLINK_HOME).
        taskmanagers: Every TaskManager started, killed ones included, in start order; the
            index is what :meth:`kill_taskmanager` takes.
        keep_logs: Whether :meth:`stop` keeps :attr:`layout`'s directory; ``None`` keeps it
            only after a failure (an exception out of the ``with`` block, or a process that
            died without being killed on purpose).
    """

    def __init__(
        self,
        settings: ClusterSettings | None = None,
        *,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 180.0,
        root: str | os.PathLike[str] | None = None,
        keep_logs: bool | None = None,
    ) -> None:
        """Prepares a cluster; nothing starts before :meth:`start`.

        Args:
            settings: Sizes, heartbeats, restart strategy, Python; the defaults are two
                TaskManagers of two slots.
            env: Variables for every process on top of this process's environment: the
                TaskManagers hand them to their Python workers, the clients to the job script
                (the emulator hosts, ``GOOGLE_CLOUD_PROJECT``).
            start_timeout: Seconds the JobManager and then the TaskManagers may take to come
                up; generous because JVMs start slowly on a loaded machine.
            root: The cluster's directory; a new temporary one by default (a directory passed
                in is never removed).
            keep_logs: See :attr:`keep_logs`.
        """
        self.settings = settings or ClusterSettings()
        self.env: dict[str, str] = dict(env or {})
        self.start_timeout = start_timeout
        self._own_root = root is None
        self.layout = ClusterLayout(
            Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="pyflink-gcp-flink-"))
        )
        self.keep_logs = keep_logs
        self.home = flink_home()
        self.ports: ClusterPorts | None = None
        self.jobmanager: ManagedProcess | None = None
        self.taskmanagers: list[TaskManager] = []
        self._clients: set[ManagedProcess] = set()
        self._submissions = 0
        self._reaper: GroupReaper | None = None
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._failed = False

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._failed = True
        self.stop()

    @property
    def rest_url(self) -> str:
        """The JobManager's REST endpoint (also the web UI), ``http://127.0.0.1:PORT``."""
        if self.ports is None:
            raise ClusterError("the cluster has not been started")
        return f"http://{LOOPBACK}:{self.ports.rest}"

    @property
    def flink(self) -> Path:
        """The wheel's ``bin/flink``, the command line client."""
        return self.home / "bin" / "flink"

    def start(self) -> StandaloneCluster:
        """Writes the configuration, starts the JobManager, then the TaskManagers, and waits
        until every TaskManager registered with it.

        Raises:
            ClusterError: A process did not come up in time or exited first; the message
                carries the tail of its output. Whatever had started is stopped first.
        """
        if self._started:
            return self
        self._started = True
        try:
            self.layout.create()
            self.ports = ClusterPorts.choose()
            write_conf_dir(
                self.home, self.layout, cluster_config(self.settings, self.ports, self.layout)
            )
            self._reaper = GroupReaper()
            with _live_lock:
                _live.add(self)
            self.jobmanager = self._spawn("jobmanager", "jobmanager", [])
            self._wait(
                lambda: http_json("GET", f"{self.rest_url}/overview", timeout=2.0)[0] == 200,
                "the JobManager's REST endpoint",
                self.jobmanager,
            )
            started = [self._spawn_taskmanager() for _ in range(self.settings.taskmanagers)]
            for taskmanager in started:
                self.wait_for_taskmanager(taskmanager.resource_id)
        except BaseException:
            self._failed = True
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every client, TaskManager and the JobManager (whole process groups); idempotent.

        TaskManagers first, so the JobManager does not spend the shutdown restarting jobs.
        The directory is removed unless :attr:`keep_logs` (or a failure) says to keep it.
        """
        with self._lock:
            if self._stopped:
                return
            if self.died():
                self._failed = True
            self._stopped = True
        processes = [*self._clients, *(tm.process for tm in self.taskmanagers)]
        threads = [threading.Thread(target=p.stop, args=(10.0,), daemon=True) for p in processes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        if self.jobmanager is not None:
            self.jobmanager.stop(10.0)
        everything = [*processes, *([self.jobmanager] if self.jobmanager else [])]
        if self._reaper is not None:
            if all(not p.alive() for p in everything):
                self._reaper.close()
            self._reaper = None
        with _live_lock:
            _live.discard(self)
        keep = self.keep_logs if self.keep_logs is not None else self._failed
        if not keep and self._own_root:
            shutil.rmtree(self.layout.root, ignore_errors=True)

    def logs_kept(self) -> Path | None:
        """The directory holding the logs once :meth:`stop` kept them, else None."""
        return self.layout.root if self._stopped and self.layout.root.exists() else None

    def died(self) -> list[str]:
        """Describes each process that ended without being killed on purpose (empty once
        :meth:`stop` ran, which ends them all)."""
        if self._stopped:
            return []
        found = []
        candidates = [("the JobManager", self.jobmanager)] + [
            (f"TaskManager {tm.resource_id}", tm.process)
            for tm in self.taskmanagers
            if not tm.killed
        ]
        for name, process in candidates:
            how = process.describe_exit() if process is not None else None
            if how is not None:
                found.append(f"{name} {how}. Log {process.log_path if process else '?'}")
        return found

    # -- TaskManagers -------------------------------------------------------------------

    def kill_taskmanager(self, index: int) -> TaskManager:
        """Kills TaskManager ``index`` with SIGKILL: its JVM and its Python workers at once.

        A crashed machine or an OOM-killed container leaves no time for a shutdown hook,
        and the process group holds the workers too, so none of them finishes a write.

        Returns:
            The killed TaskManager.
        """
        taskmanager = self.taskmanagers[index]
        taskmanager.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(taskmanager.process.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and group_members(taskmanager.process.pgid):
            taskmanager.process.exited()
            time.sleep(0.05)
        taskmanager.process.exited()
        if self._reaper is not None:
            self._reaper.forget(taskmanager.process.pgid)
        return taskmanager

    def start_taskmanager(self, wait: bool = True) -> TaskManager:
        """Starts one more TaskManager (a replacement after a kill) and waits until it
        registered, unless ``wait`` is false."""
        taskmanager = self._spawn_taskmanager()
        if wait:
            self.wait_for_taskmanager(taskmanager.resource_id)
        return taskmanager

    def ensure_taskmanagers(self, count: int, tries: int = 3) -> list[str]:
        """Starts TaskManagers until ``count`` live ones registered, each start waiting for
        its registration.

        A start that fails (the process exits before it registered, or does not register
        within the start timeout) is killed, reported and tried again, ``tries`` times in all.
        TaskManagers that exited by themselves earlier are not counted as live (nor reported:
        that is the caller's to do, with :meth:`TaskManager.exit_report`).

        Returns:
            One :meth:`TaskManager.exit_report` (or timeout message) per failed start.

        Raises:
            ClusterError: Still fewer than ``count`` after ``tries`` failed starts; the
                message carries every failure.
        """
        failures: list[str] = []
        while len(self.live_taskmanagers()) < count:
            if len(failures) >= tries:
                raise ClusterError(
                    f"{len(self.live_taskmanagers())} of {count} TaskManagers running after "
                    f"{tries} failed starts: " + "; ".join(failures)
                )
            taskmanager = self._spawn_taskmanager()
            try:
                self.wait_for_taskmanager(taskmanager.resource_id)
            except ClusterError as err:
                report = taskmanager.exit_report() or str(err)[:1500]
                self.kill_taskmanager(self.taskmanagers.index(taskmanager))
                failures.append(report)
        return failures

    def live_taskmanagers(self) -> list[TaskManager]:
        """The TaskManagers neither killed nor exited, in start order."""
        return [tm for tm in self.taskmanagers if not tm.killed and tm.process.exited() is None]

    def slots(self) -> Slots:
        """The slots of the live TaskManagers registered with the JobManager (REST)."""
        listed = self.rest("/taskmanagers").get("taskmanagers", [])
        return free_slots(listed, {tm.resource_id for tm in self.live_taskmanagers()})

    def registered_taskmanagers(self) -> list[str]:
        """The resource ids the JobManager lists (a killed one until its heartbeat times out)."""
        return [tm["id"] for tm in self.rest("/taskmanagers").get("taskmanagers", [])]

    def wait_for_taskmanager(self, resource_id: str) -> None:
        """Waits until the TaskManager ``resource_id`` registered with the JobManager.

        Raises:
            ClusterError: It did not register within the start timeout or exited first.
        """
        process = next(tm.process for tm in self.taskmanagers if tm.resource_id == resource_id)
        self._wait(
            lambda: resource_id in self.registered_taskmanagers(),
            f"TaskManager {resource_id} registering",
            process,
        )

    # -- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        script: str | os.PathLike[str],
        *args: str,
        parallelism: int = 4,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        detached: bool = False,
        options: Sequence[str] = (),
        timeout: float = 900.0,
    ) -> Submission:
        """Runs ``bin/flink run -py script args`` against this cluster and waits for the client.

        Attached (the default), the client runs the script to its end: ``env.execute()``
        returns when the job finished, so a script that checks what it wrote reports through
        the exit status. Detached, the client ends once the job was accepted.

        Args:
            script: The job's Python file.
            *args: The script's own arguments.
            parallelism: ``-p``: the default parallelism (a script that sets its own wins).
            python: ``-pyexec`` and ``-pyclientexec``, when not the cluster's Python.
            env: More variables for the client and the job script (the cluster's ``env`` is
                already there).
            detached: ``-d``.
            options: More ``flink run`` options, before ``-py``.
            timeout: Seconds the client may run; then its process group is killed.

        Raises:
            ClusterError: The cluster is not running or the client exceeded ``timeout``.
        """
        if self.jobmanager is None or self._stopped:
            raise ClusterError("the cluster is not running")
        argv = ["bash", str(self.flink), "run", "-p", str(parallelism)]
        if detached:
            argv.append("-d")
        if python is not None:
            argv += ["-pyexec", python, "-pyclientexec", python]
        argv += [*options, "-py", str(Path(script).resolve()), *args]
        with self._lock:
            self._submissions += 1
            number = self._submissions
        name = f"client-{number}"
        environment = process_env(os.environ, {**self.env, **(env or {})}, self.layout, name)
        started = time.monotonic()
        client = ManagedProcess(
            name, argv, log_path=self.layout.log / f"{name}.out", env=environment
        )
        self._clients.add(client)
        try:
            client.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as err:
            client.stop()
            raise ClusterError(
                f"flink run {Path(script).name} did not end within {timeout:g} s. Output "
                f"{client.log_path}:\n{client.log_tail()}"
            ) from err
        finally:
            # Its process group may hold a Python client still flushing output.
            client.stop(5.0)
            self._clients.discard(client)
        output = client.log_path.read_text(errors="replace")
        match = _JOB_ID.search(output)
        return Submission(
            argv=argv,
            returncode=client.popen.returncode,
            output=output,
            job_id=match.group(1) if match else None,
            log_path=client.log_path,
            seconds=time.monotonic() - started,
        )

    def rest(self, path: str) -> Any:
        """GETs ``path`` of the REST API and returns the decoded JSON.

        Raises:
            ClusterError: The answer was not 200 or the JobManager is not reachable.
        """
        url = f"{self.rest_url}/{path.lstrip('/')}"
        try:
            status, body = http_json("GET", url, timeout=10.0)
        except OSError as err:
            raise ClusterError(f"GET {url}: {err}") from err
        if status != 200:
            raise ClusterError(f"GET {url}: HTTP {status}: {body}")
        return body

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the JobManager knows (``/jobs/overview``): ``jid``, ``name``, ``state``..."""
        jobs: list[dict[str, Any]] = self.rest("/jobs/overview").get("jobs", [])
        return jobs

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's details (``/jobs/<id>``): its ``state``, vertices and timestamps."""
        details: dict[str, Any] = self.rest(f"/jobs/{urllib.parse.quote(job_id)}")
        return details

    def checkpoints(self, job_id: str) -> dict[str, Any]:
        """The job's checkpoint statistics (``/jobs/<id>/checkpoints``): ``counts``,
        ``latest.completed``, ``latest.restored``..."""
        stats: dict[str, Any] = self.rest(f"/jobs/{urllib.parse.quote(job_id)}/checkpoints")
        return stats

    def exceptions(self, job_id: str) -> list[dict[str, Any]]:
        """The job's failure history (``/jobs/<id>/exceptions``), newest first."""
        body = self.rest(f"/jobs/{urllib.parse.quote(job_id)}/exceptions")
        history: list[dict[str, Any]] = body.get("exceptionHistory", {}).get("entries", [])
        return history

    def wait_for_checkpoints(self, job_id: str, count: int, timeout: float = 120.0) -> int:
        """Waits until the job completed at least ``count`` checkpoints in all.

        Returns:
            The number of completed checkpoints seen.

        Raises:
            ClusterError: Not within ``timeout``, or the job ended first.
        """
        deadline = time.monotonic() + timeout
        while True:
            completed = int(self.checkpoints(job_id).get("counts", {}).get("completed", 0))
            if completed >= count:
                return completed
            state = self.job(job_id).get("state")
            if state in TERMINAL_STATES:
                raise ClusterError(
                    f"job {job_id} ended {state} after {completed} of {count} checkpoints"
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"job {job_id}: {completed} of {count} checkpoints after {timeout:g} s"
                )
            time.sleep(0.2)

    def wait_for_job(self, job_id: str, timeout: float = 600.0) -> str:
        """Waits until the job reached a terminal state and returns it (``FINISHED``...).

        Raises:
            ClusterError: Still running after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = str(self.job(job_id).get("state"))
            if state in TERMINAL_STATES:
                return state
            if time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} still {state} after {timeout:g} s")
            time.sleep(0.5)

    def job_blobs(self, job_id: str) -> dict[str, list[Path]]:
        """The files of the job in each process's blob store or cache, by process name.

        A job's jars (``pipeline.jars``: the bridge jar) travel from the client to the
        JobManager's blob server and from there to each TaskManager that runs one of the job's
        tasks; a TaskManager keeps them in its cache for a while after the job ended
        (``blob.service.cleanup.interval``), so a test can tell what reached which.
        """
        found: dict[str, list[Path]] = {}
        # The JobManager's server keeps blobStore-*/job_<id>/, a TaskManager's cache
        # tm_<resource id>/blobStorage/job_<id>/, each under the process's io.tmp.dirs.
        for directory in sorted(self.layout.tmp.glob(f"*/**/job_{job_id}")):
            process = directory.relative_to(self.layout.tmp).parts[0]
            found.setdefault(process, []).extend(sorted(directory.iterdir()))
        return found

    # -- helpers ------------------------------------------------------------------------

    def _spawn(self, name: str, script: str, args: Sequence[str]) -> ManagedProcess:
        tmp = self.layout.tmp_of(name)
        tmp.mkdir(parents=True, exist_ok=True)
        argv = [
            "bash",
            str(self.home / "bin" / f"{script}.sh"),
            "start-foreground",
            # "-D" and its value apart: jobmanager.sh takes a first argument that is not "-D"
            # for the legacy host argument.
            "-D",
            f"io.tmp.dirs={tmp}",
            *args,
        ]
        env = process_env(os.environ, self.env, self.layout, name)
        try:
            process = ManagedProcess(name, argv, log_path=self.layout.log / f"{name}.out", env=env)
        except EmulatorError as err:
            raise ClusterError(str(err)) from err
        if self._reaper is not None:
            self._reaper.watch(process.pgid)
        return process

    def _spawn_taskmanager(self) -> TaskManager:
        resource_id = f"taskmanager-{len(self.taskmanagers) + 1}"
        process = self._spawn(
            resource_id, "taskmanager", ["-D", f"taskmanager.resource-id={resource_id}"]
        )
        taskmanager = TaskManager(resource_id, process)
        self.taskmanagers.append(taskmanager)
        return taskmanager

    def _wait(self, probe: Any, what: str, process: ManagedProcess) -> None:
        try:
            wait_until(probe, timeout=self.start_timeout, what=what, process=process, interval=0.5)
        except EmulatorError as err:
            raise ClusterError(str(err)) from err
