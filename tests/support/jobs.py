"""Helpers to build and run small PyFlink MiniCluster jobs in tests, examples and benchmarks.

- :func:`make_env` configures the environment the way every job here needs it (the workers'
  Python, checkpointing, a restart strategy, optional process workers for kill tests).
- :func:`record_stream` is a replayable, checkpointed source of Python records:
  ``NumberSequenceSource`` followed by a map to the record (``from_collection`` of dicts is not).
- :class:`FailOnce` injects one failure at a chosen record, once per marker file, so the job
  restarts from its last checkpoint and replays; :class:`FailAt` one at each of several record
  ids, slowly enough that checkpoints complete between them. Both can hold the failure back
  until a checkpoint completed (``after_checkpoint``, see ``tests/support/restore.py``).
- :class:`Paced` passes records through at a bounded rate, so a job lasts long enough for
  checkpoints, kills or a cancel to land while it runs; :func:`pause` paces a record function.
  Both can stop pacing once a fault's marker file exists (``until``): the rest of the input,
  and the replay after the restart, then cost no waiting.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import time
from collections.abc import Callable
from typing import Any

from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import MapFunction

from tests.support.restore import checkpoint_completed, latest_checkpoint_completed

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_env(
    parallelism: int = 2,
    checkpoint_ms: int | None = 1000,
    *,
    thread_mode: bool = False,
    process_workers: bool = False,
    restarts: int = 3,
    extra: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    """A MiniCluster environment ready for pyflink-gcp jobs.

    Args:
        parallelism: Default parallelism.
        checkpoint_ms: Checkpoint interval, or None for no checkpointing.
        thread_mode: Run Python operators in thread mode (the sinks still use process mode).
        process_workers: Run Python workers as real processes instead of threads of this
            process (needed to kill a worker, and for honest throughput figures).
        restarts: Restarts the test expects (injected failures); 0 fails the job at its first
            failure.
        extra: More configuration entries.
    """
    # Workers (and the embedded interpreter of thread mode) must import this repository and the
    # venv's packages.
    site = sysconfig.get_paths()["purelib"]
    paths = [REPO_ROOT, site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    conf = Configuration()
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    if restarts > 0:
        # Quick restarts on a quiet machine; on a busy one a restart that finds its slot not yet
        # free (NoResourceAvailableException) waits longer each time instead of using up its
        # attempts within a second. The attempts are what a test injects plus that headroom,
        # about 45 s of waiting (the slots of a job whose worker was killed came back after
        # more than the 18 s of five more attempts once, on a machine at load 8-100); 3 s
        # without a failure starts the back-off over, so spaced injected failures each restart
        # quickly.
        conf.set_string("restart-strategy.type", "exponential-delay")
        conf.set_string("restart-strategy.exponential-delay.initial-backoff", "200 ms")
        conf.set_string("restart-strategy.exponential-delay.max-backoff", "4 s")
        conf.set_string("restart-strategy.exponential-delay.backoff-multiplier", "2.0")
        conf.set_string("restart-strategy.exponential-delay.jitter-factor", "0.1")
        conf.set_string("restart-strategy.exponential-delay.reset-backoff-threshold", "3 s")
        conf.set_string(
            "restart-strategy.exponential-delay.attempts-before-reset-backoff", str(restarts + 12)
        )
    else:
        conf.set_string("restart-strategy.type", "none")
    if thread_mode:
        conf.set_string("python.execution-mode", "thread")
    # PyFlink reads the worker mode from this variable when the job is submitted.
    if process_workers:
        os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112
    else:
        os.environ.pop("_python_worker_execution_mode", None)
    for key, value in (extra or {}).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    if checkpoint_ms is not None:
        env.enable_checkpointing(checkpoint_ms)
    return env


def record_stream(
    env: StreamExecutionEnvironment,
    count: int,
    to_record: Callable[[int], Any],
    *,
    name: str = "records",
    parallelism: int | None = None,
) -> DataStream:
    """A replayable stream of ``to_record(i)`` for i in [0, count).

    With ``parallelism=1`` the records come in ``i`` order (one split, one reader, one map), which
    tests of per-key order need: with several readers one key's records interleave arbitrarily.
    """
    source = NumberSequenceSource(0, count - 1)
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), name)
    if parallelism is not None:
        ds = ds.set_parallelism(parallelism)
    mapped = ds.map(to_record)
    if parallelism is not None:
        mapped = mapped.set_parallelism(parallelism)
    return mapped


class _AfterCheckpoint:
    """Holds an injected failure back until a checkpoint of the job completed.

    A failure before any completed checkpoint restarts the job from scratch, which replays every
    record and so hides a sink that lost its buffer (``tests/support/restore.py``). The failure
    is deferred to a later record, not waited for in place: the record it is due at was handed
    to the Python worker before the barrier of the checkpoint to wait for, and that checkpoint
    cannot complete while the worker is blocked on it. While a failure is deferred, each record
    is slowed by 2 ms, so the input cannot run out before a checkpoint completes (a fast
    machine once finished the input first); bundles of up to a few hundred records keep the
    barrier's wait short.

    ``first``: the lowest checkpoint id that counts. Jobs with forced unaligned checkpoints
    (``aligned-checkpoint-timeout`` 0) pass 2: under Flink 2.3 a restore of the first checkpoint
    can lose a source split assigned while that checkpoint was triggered (docs/reliability.md,
    "Unaligned checkpoints and source splits"), which no sink can replay.

    ``then``: records to let through after the completion was seen before failing, for a test
    that needs the restart to replay something the failing subtask processed. Without them the
    failure may hit the first record after the barrier, and the restart replays only that one.
    They count after the newest completed checkpoint: should a newer one complete while they
    pass, the count starts again, since records before its barrier are not replayed.
    """

    def __init__(self, checkpoints: str | None, first: int = 1, then: int = 0) -> None:
        self._checkpoints = checkpoints
        self._first = first
        self._completed = checkpoints is None
        self._due = False
        self._next_look = 0.0
        self._then = then
        self._passed = 0
        self._counted_after = 0

    def ready(self, due: bool) -> bool:
        """Whether to fail now; ``due`` says whether this record is one to fail at."""
        self._due = self._due or due
        if not self._due:
            return False
        if not self._completed:
            time.sleep(0.002)
            now = time.monotonic()
            if now < self._next_look:  # a directory listing per record would slow the job
                return False
            self._next_look = now + 0.02
            self._completed = checkpoint_completed(str(self._checkpoints), self._first)
        if not self._completed or self._then == 0:
            return self._completed
        if self._passed < self._then:
            if self._passed == 0:
                self._counted_after = latest_checkpoint_completed(str(self._checkpoints))
            self._passed += 1
            return False
        newest = latest_checkpoint_completed(str(self._checkpoints))
        if newest != self._counted_after:
            self._counted_after = newest
            self._passed = 1
            return False
        return True

    def fired(self) -> None:
        self._due = False


class FailOnce(MapFunction):
    """Pass records through; raise (or kill the worker) once when ``when(record)`` is true.

    "Once" is remembered in ``marker_path`` so the replay after the restart passes. With
    ``hard=True`` the Python worker process exits at once (no ``close()``, no flush), which
    needs ``make_env(process_workers=True)``. With ``after_checkpoint`` (a
    :class:`~tests.support.restore.Failover`'s ``checkpoints``) the failure waits for the first
    record after a checkpoint completed, so the restart restores one; with ``then`` as well,
    ``then`` records after it (see :class:`_AfterCheckpoint`).
    """

    def __init__(
        self,
        marker_path: str,
        when: Callable[[Any], bool],
        hard: bool = False,
        *,
        after_checkpoint: str | None = None,
        first_checkpoint: int = 1,
        then: int = 0,
    ) -> None:
        self._marker = marker_path
        self._when = when
        self._hard = hard
        self._after = _AfterCheckpoint(after_checkpoint, first_checkpoint, then)

    def map(self, value: Any) -> Any:
        due = not os.path.exists(self._marker) and self._when(value)
        if self._after.ready(due) and not os.path.exists(self._marker):
            self._after.fired()
            with open(self._marker, "w") as f:
                f.write("failed\n")
            if self._hard:
                os._exit(17)
            raise RuntimeError("injected failure (test)")
        return value


class FailAt(MapFunction):
    """Pass records (dicts with an ``id``) through, sleeping 50 ms every 50 so checkpoints
    complete between failures; fail at each id of ``at`` once: raise, or end the Python worker
    at once (``hard``, process workers). With ``after_checkpoint`` each failure waits for the
    first record after a checkpoint completed (see :class:`FailOnce`).

    Each failure is owed in ``directory`` from the moment its record is seen (a ``due-<id>``
    file) until one subtask claims it (creating ``failed-<id>`` exclusively) and fails. A
    failure held back for a checkpoint therefore survives a restart that another subtask's
    failure caused first: the restore may start after the record it was due at, which the
    job then never sees again, and a failure owed only in memory would be lost with it.
    """

    def __init__(
        self,
        directory: str,
        at: tuple[int, ...],
        hard: bool,
        *,
        after_checkpoint: str | None = None,
        first_checkpoint: int = 1,
    ) -> None:
        self._directory = directory
        self._at = frozenset(at)
        self._hard = hard
        self._after = _AfterCheckpoint(after_checkpoint, first_checkpoint)
        self._owed: list[int] | None = None  # None: not looked up in this attempt yet
        self._next_look = 0.0

    def map(self, value: Any) -> Any:
        i = value["id"]
        if i % 50 == 0:
            time.sleep(0.05)
        if i in self._at and not os.path.exists(self._marker("failed", i)):
            open(self._marker("due", i), "a").close()
            self._owed = None
        owed = self._owed_failures()
        if owed and self._after.ready(True):
            self._after.fired()
            self._owed = None
            for due in owed:
                if self._claim(due):
                    if self._hard:
                        os._exit(23)
                    raise RuntimeError(f"injected failure due at {due}, at {i} (test)")
        return value

    def _owed_failures(self) -> list[int]:
        """The failures due and not yet claimed, looked up at most every 20 ms (a directory
        listing per record would slow the job)."""
        now = time.monotonic()
        if self._owed is None or now >= self._next_look:
            self._next_look = now + 0.02
            self._owed = sorted(
                i
                for i in self._at
                if os.path.exists(self._marker("due", i))
                and not os.path.exists(self._marker("failed", i))
            )
        return self._owed

    def assert_fired(self) -> None:
        """Fail the test unless every failure of ``at`` was injected, saying for each one that
        was not whether its record was seen at all (``due``) or the job ran out of records after
        it before a checkpoint let it fire."""
        missing = {
            i: "due, never fired" if os.path.exists(self._marker("due", i)) else "never seen"
            for i in sorted(self._at)
            if not os.path.exists(self._marker("failed", i))
        }
        assert not missing, (
            f"failures not injected: {missing}; markers: {os.listdir(self._directory)}"
        )

    def _claim(self, i: int) -> bool:
        try:
            os.close(os.open(self._marker("failed", i), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False  # another subtask failed for it
        return True

    def _marker(self, kind: str, i: int) -> str:
        return os.path.join(self._directory, f"{kind}-{i}")


def pause(seconds: float, until: str | None = None) -> None:
    """Sleeps ``seconds``, unless the file ``until`` exists (see :class:`Paced`)."""
    if until is None or not os.path.exists(until):
        time.sleep(seconds)


class Paced(MapFunction):
    """Pass records through, sleeping ``seconds`` after every ``every`` records a subtask sees.

    With ``until`` (a path), the pacing ends once that file exists: a job paced so that a fault
    lands while it runs (the marker file of :class:`FailAt` or :class:`FailOnce`) need not pace
    the rest of its input, or the replay after its restart.
    """

    def __init__(self, every: int = 1, seconds: float = 0.01, *, until: str | None = None) -> None:
        self._every = every
        self._seconds = seconds
        self._until = until
        self._paced = True
        self._seen = 0

    def map(self, value: Any) -> Any:
        self._seen += 1
        if self._paced and self._seen % self._every == 0:
            # Looked up only when a pause is due: a file lookup per record would slow the job.
            self._paced = self._until is None or not os.path.exists(self._until)
            if self._paced:
                time.sleep(self._seconds)
        return value


def child_environ(**overrides: str) -> dict[str, str]:
    """This process's environment for a driver run as a subprocess, the way a user starts one:
    without the tests' PYTHONPATH, and without what PyFlink left here (``PYFLINK_GATEWAY_DISABLED``,
    which a thread-mode job's embedded interpreter sets, would stop the child's gateway)."""
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYFLINK_")
    }
    env.update(overrides)
    return env


def savepoint(client: Any, directory: str, *, stop: bool, tries: int = 60) -> str:
    """A savepoint of the job (and its stop, with ``stop``); its path.

    PyFlink 2.3's ``JobClient.stop_with_savepoint`` and ``trigger_savepoint`` call Java methods
    that no longer exist; these are the ones with a format type. Flink declines a savepoint
    until every task runs, and one subtask may still start its Python worker while another
    already writes, so a decline for that reason is asked again, every 0.5 s, ``tries`` times.
    """
    from pyflink.java_gateway import get_gateway

    canonical = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    j_client = client._j_job_client
    for attempt in range(tries):
        try:
            if stop:
                return str(j_client.stopWithSavepoint(False, directory, canonical).get())
            return str(j_client.triggerSavepoint(directory, canonical).get())
        except Exception as exc:  # py4j wraps Flink's CheckpointException
            if "Not all required tasks are currently running" not in str(exc):
                raise
            if attempt == tries - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


#: The job's Python bundles before the writer: records and barriers flow in 100-ms steps, so a
#: checkpoint completes within a failover test's input.
SHORT_BUNDLES = {"python.fn-execution.bundle.time": "100", "python.fn-execution.bundle.size": "100"}


def slow_number(i: int) -> int:
    """``i``, 1 ms later: the input outlasts the wait for a checkpoint, and the records never
    pile up before the writer, where a barrier would wait behind them."""
    time.sleep(0.001)
    return i
