"""The exactly-once protocol (prepare at a marker, commit after the checkpoint) in real jobs.

Over the staging test sink (:mod:`tests.support.committing`): its writer stages records, its
prepare names them in a committable, its committer publishes them to a file. Every step is
logged with its checkpoint id, so these tests check Flink's rules for a two-phase sink from the
files: commit only after the checkpoint, everything up to a completed checkpoint (an expired
one's committables with the next), restored committables after a failure, at stop-with-
savepoint and after a restore at a lower parallelism, and each record published exactly once.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from pyflink.datastream.functions import MapFunction

from tests.support.committing import StagingSink, committed_records, protocol
from tests.support.jobs import FailOnce, make_env, record_stream, savepoint
from tests.support.restore import Failover

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]


class Slow(MapFunction):
    """Pass records through, sleeping ``seconds`` every ``every`` records (a job that lasts);
    the first record creates the file ``started``, if given."""

    def __init__(self, every: int, seconds: float, started: str | None = None) -> None:
        self._every = every
        self._seconds = seconds
        self._started = started

    def map(self, value: Any) -> Any:
        if self._started is not None:
            open(self._started, "a").close()
            self._started = None
        if value["i"] % self._every == 0:
            time.sleep(self._seconds)
        return value


#: The map of a job restored from a savepoint: the same operator as the paced job's, so the
#: graphs match, without pauses. A restored job need not last; its restored committables are
#: committed when its committer opens, and the rest with its checkpoints or its final one.
UNPACED = Slow(1, 0.0)


def env_for(parallelism: int, checkpoint_ms: int, **options: Any) -> Any:
    """A job whose Python map ends its bundles every 50 records, so barriers pass it quickly."""
    extra = {"python.fn-execution.bundle.size": "50", **options.pop("extra", {})}
    return make_env(parallelism=parallelism, checkpoint_ms=checkpoint_ms, extra=extra, **options)


def record(i: int) -> dict:
    return {"i": i}


def steps(directory, step: str) -> list[dict]:
    return [s for s in protocol(str(directory)) if s["step"] == step]


def assert_exactly_once(directory, count: int) -> None:
    published = committed_records(str(directory))
    assert set(published) == set(range(count)), sorted(set(range(count)) - set(published))[:20]
    assert max(published.values()) == 1, [i for i, n in published.items() if n > 1][:20]


def commit_of(directory) -> dict[str, dict]:
    """The first commit step of each committable, by its name."""
    first: dict[str, dict] = {}
    for step in steps(directory, "commit"):
        for name in step["ids"]:
            first.setdefault(name, step)
    return first


def test_each_checkpoint_is_prepared_then_committed_after_it_completes(tmp_path) -> None:
    count = 3_000
    env = env_for(2, 200)
    record_stream(env, count, record).map(Slow(50, 0.1)).sink_to(StagingSink(str(tmp_path)))
    env.execute("commit protocol")

    prepares = steps(tmp_path, "prepare")
    commits = commit_of(tmp_path)
    checkpoints = {p["checkpoint"] for p in prepares if p["checkpoint"] > 0}
    assert len(checkpoints) >= 5, checkpoints
    for prepared in prepares:
        committed = commits.get(prepared["id"])
        assert committed is not None, prepared  # every committable is committed...
        assert committed["t"] >= prepared["t"]  # ...after it was prepared...
        if prepared["checkpoint"] > 0:  # ...by its checkpoint, or a later one
            assert committed["checkpoint"] >= prepared["checkpoint"], (prepared, committed)
        assert not committed["restored"]
    # The end of input's committables go with the first checkpoint after the subtask's input
    # ended (the final one, or one the other subtask still takes part in).
    last = [p for p in prepares if p["checkpoint"] == -1]
    assert len(last) == 2
    for end in last:
        before = max(p["checkpoint"] for p in prepares if p["subtask"] == end["subtask"])
        assert commits[end["id"]]["checkpoint"] > before, (end, commits[end["id"]])
    assert_exactly_once(tmp_path, count)


def test_an_expired_checkpoint_commits_nothing_until_the_next_one_completes(tmp_path) -> None:
    count = 3_000
    slow = 4
    env = env_for(
        1,
        300,
        extra={
            "execution.checkpointing.timeout": "1 s",
            "execution.checkpointing.tolerable-failed-checkpoints": "100",
        },
    )
    sink = StagingSink(str(tmp_path), slow_prepare=(slow, 2.5, str(tmp_path / "slow.marker")))
    record_stream(env, count, record).map(Slow(50, 0.1)).sink_to(sink)
    env.execute("expired checkpoint")

    commits = commit_of(tmp_path)
    prepares = steps(tmp_path, "prepare")
    [expired] = [p for p in prepares if p["checkpoint"] == slow]
    # Its set (stored under the expired checkpoint) waited for a later checkpoint: committed
    # only after the writer prepared for the next one.
    later = min(p["t"] for p in prepares if p["checkpoint"] > slow)
    assert commits[expired["id"]]["t"] > later, (expired, commits[expired["id"]])
    assert_exactly_once(tmp_path, count)


@pytest.mark.parametrize("hard", [False, True], ids=["task exception", "killed worker"])
def test_a_failover_replays_into_new_committables_and_publishes_each_record_once(
    tmp_path, hard: bool
) -> None:
    count = 4_000
    failover = Failover(tmp_path / "failover")
    env = env_for(2, 200, process_workers=hard, extra=failover.conf())
    fail = FailOnce(
        str(tmp_path / "fail.marker"),
        lambda r: r["i"] == 2_500,
        hard=hard,
        after_checkpoint=failover.checkpoints,
    )
    record_stream(env, count, record).map(Slow(50, 0.1)).map(fail).sink_to(
        StagingSink(str(tmp_path))
    )
    env.execute("failover")
    assert os.path.exists(tmp_path / "fail.marker"), "the failure was not injected"
    failover.assert_restored()

    attempts = {p["id"].split("-")[1] for p in steps(tmp_path, "prepare")}
    assert len(attempts) >= 2, attempts  # the job restarted
    assert_exactly_once(tmp_path, count)


def test_a_commit_interrupted_by_a_killed_worker_is_committed_again_from_the_checkpoint(
    tmp_path,
) -> None:
    count = 3_000
    # The worker dies in a commit, which runs only once its checkpoint completed.
    failover = Failover(tmp_path / "failover")
    env = env_for(1, 200, process_workers=True, extra=failover.conf())
    sink = StagingSink(str(tmp_path), kill_in_commit=str(tmp_path / "kill.marker"))
    record_stream(env, count, record).map(Slow(50, 0.1)).sink_to(sink)
    env.execute("killed in commit")
    assert os.path.exists(tmp_path / "kill.marker"), "the worker was not killed"
    failover.assert_restored()

    commits = steps(tmp_path, "commit")
    first = next(c for c in commits if c["ids"])
    again = [c for c in commits if c["restored"]]
    assert again and set(first["ids"]) <= set(again[0]["ids"]), (first, again)
    assert_exactly_once(tmp_path, count)


def wait_for_commits(directory, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(directory / "_protocol.jsonl") and len(steps(directory, "commit")) >= n:
            return
        time.sleep(0.5)
    raise AssertionError(f"fewer than {n} commits after {timeout_s} s")


def test_stop_with_savepoint_commits_and_a_restore_at_lower_parallelism_goes_on(tmp_path) -> None:
    count = 2_000
    savepoints = tmp_path / "savepoints"
    env = env_for(2, 300)
    record_stream(env, count, record).map(Slow(20, 0.1)).sink_to(StagingSink(str(tmp_path)))
    client = env.execute_async("stop with savepoint")
    wait_for_commits(tmp_path, 3)
    path = savepoint(client, f"file://{savepoints}", stop=True)

    # Everything prepared by the stopped job was committed by it.
    commits = commit_of(tmp_path)
    assert all(p["id"] in commits for p in steps(tmp_path, "prepare"))
    published = committed_records(str(tmp_path))
    assert 0 < len(published) < count

    env = env_for(1, 300, extra={"execution.state-recovery.path": path})
    record_stream(env, count, record).map(UNPACED).sink_to(StagingSink(str(tmp_path)))
    env.execute("restored from the savepoint")
    assert_exactly_once(tmp_path, count)


def test_a_savepoint_restored_at_lower_parallelism_commits_the_removed_subtasks_committables(
    tmp_path,
) -> None:
    count = 6_000
    savepoints = tmp_path / "savepoints"
    started = tmp_path / "started"
    # Hardly a periodic checkpoint: the savepoint holds the committables, and an intermediate
    # savepoint commits nothing (Flink does not notify its completion).
    env = env_for(2, 3_600_000)
    record_stream(env, count, record).map(Slow(20, 0.05, str(started))).sink_to(
        StagingSink(str(tmp_path))
    )
    client = env.execute_async("savepoint")
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)
    path = savepoint(client, f"file://{savepoints}", stop=False)
    client.cancel().result()
    # What the cancelled job prepared and did not commit (the savepoint's own committables).
    committed = set(commit_of(tmp_path))
    prepared = {p["id"] for p in steps(tmp_path, "prepare")} - committed
    assert {name.split("-")[0] for name in prepared} == {"0", "1"}, prepared

    env = env_for(1, 300, extra={"execution.state-recovery.path": path})
    record_stream(env, count, record).map(UNPACED).sink_to(StagingSink(str(tmp_path)))
    env.execute("restored at parallelism 1")

    [restored] = [c for c in steps(tmp_path, "commit") if c["restored"]]
    assert prepared <= set(restored["ids"]), (prepared, restored)
    assert_exactly_once(tmp_path, count)


UNALIGNED = {
    "execution.checkpointing.unaligned.enabled": "true",
    "execution.checkpointing.unaligned.forced": "true",
    "execution.checkpointing.aligned-checkpoint-timeout": "0 s",
    # Output buffers flushed rarely: the barrier overtakes the committables in them, so they
    # reach the committer after its snapshot (and, after a restore, from the channel state).
    "execution.buffer-timeout": "2 s",
}


@pytest.mark.parametrize("hard", [False, True], ids=["task exception", "killed worker"])
def test_kept_committables_survive_a_failover_and_are_published_once(tmp_path, hard) -> None:
    count = 4_000
    failover = Failover(tmp_path / "failover")
    env = env_for(2, 200, process_workers=hard, extra=failover.conf())
    fail = FailOnce(
        str(tmp_path / "fail.marker"),
        lambda r: r["i"] == 2_500,
        hard=hard,
        after_checkpoint=failover.checkpoints,
        first_checkpoint=2,  # a restore of the first can lose a source split (Flink, unaligned)
    )
    sink = StagingSink(str(tmp_path), keep_once=True)
    record_stream(env, count, record).map(Slow(50, 0.1)).map(fail).sink_to(sink)
    env.execute("kept committables")
    assert os.path.exists(tmp_path / "fail.marker"), "the failure was not injected"
    failover.assert_restored()

    commits = steps(tmp_path, "commit")
    kept = {name for c in commits for name in c["kept"]}
    assert kept, commits  # the committer kept some, and got them back with a later set
    assert any(c["restored"] for c in commits), commits  # the job restored from a checkpoint
    assert_exactly_once(tmp_path, count)


@pytest.mark.parametrize("hard", [False, True], ids=["task exception", "killed worker"])
def test_unaligned_checkpoints_lose_no_committable_across_a_failover(tmp_path, hard) -> None:
    count = 4_000
    failover = Failover(tmp_path / "failover")
    env = env_for(2, 300, process_workers=hard, extra={**UNALIGNED, **failover.conf()})
    fail = FailOnce(
        str(tmp_path / "fail.marker"),
        lambda r: r["i"] == 2_500,
        hard=hard,
        after_checkpoint=failover.checkpoints,
        first_checkpoint=2,  # a restore of the first can lose a source split (Flink, unaligned)
    )
    sink = StagingSink(str(tmp_path), keep_once=True)
    record_stream(env, count, record).map(Slow(50, 0.1)).map(fail).sink_to(sink)
    env.execute("unaligned")
    assert os.path.exists(tmp_path / "fail.marker"), "the failure was not injected"
    failover.assert_restored()

    assert any(c["restored"] for c in steps(tmp_path, "commit"))
    # Every committable prepared for a checkpoint the job completed is published once.
    assert_exactly_once(tmp_path, count)


def test_checkpointing_enabled_after_the_sink_still_commits_with_the_final_checkpoint(
    tmp_path,
) -> None:
    count = 500
    env = env_for(1, None)
    record_stream(env, count, record).sink_to(StagingSink(str(tmp_path)))
    env.enable_checkpointing(300)  # after sink_to: the committer learns it when it runs
    env.execute("checkpointing enabled late")

    [end] = [p for p in steps(tmp_path, "prepare") if p["checkpoint"] == -1]
    committed = commit_of(tmp_path)[end["id"]]
    # With the final checkpoint (a real id), not at the end of input (-1) before it; the last
    # commit is the final one.
    assert committed["checkpoint"] > 0, committed
    assert steps(tmp_path, "commit")[-1]["final"]
    assert_exactly_once(tmp_path, count)


def test_stop_with_savepoint_is_a_final_commit_that_keeps_nothing(tmp_path) -> None:
    count = 2_000
    savepoints = tmp_path / "savepoints"
    env = env_for(1, 300)
    sink = StagingSink(str(tmp_path), keep_once=True)
    record_stream(env, count, record).map(Slow(20, 0.1)).sink_to(sink)
    client = env.execute_async("stop with savepoint, keeping")
    wait_for_commits(tmp_path, 3)
    path = savepoint(client, f"file://{savepoints}", stop=True)

    last = steps(tmp_path, "commit")[-1]
    assert last["final"] and not last["kept"], last
    # Everything prepared by the stopped job was published by it.
    published = committed_records(str(tmp_path))
    prepared = sum(p["count"] for p in steps(tmp_path, "prepare"))
    assert len(published) == prepared > 0

    env = env_for(1, 300, extra={"execution.state-recovery.path": path})
    record_stream(env, count, record).map(UNPACED).sink_to(StagingSink(str(tmp_path)))
    env.execute("restored from the savepoint")
    assert_exactly_once(tmp_path, count)


def test_a_restore_after_an_operator_was_added_upstream_commits_the_savepoints_committables(
    tmp_path,
) -> None:
    """The committer's uid is stable, so the savepoint's committables reach it even though the
    job graph changed and unclaimed state is allowed (the committer's would be dropped)."""
    count = 6_000
    savepoints = tmp_path / "savepoints"
    started = tmp_path / "started"
    env = env_for(1, 3_600_000)
    record_stream(env, count, record).map(Slow(20, 0.05, str(started))).sink_to(
        StagingSink(str(tmp_path))
    )
    client = env.execute_async("before the upgrade")
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)
    path = savepoint(client, f"file://{savepoints}", stop=False)
    client.cancel().result()
    prepared = {p["id"] for p in steps(tmp_path, "prepare")} - set(commit_of(tmp_path))
    assert prepared

    extra = {
        "execution.state-recovery.path": path,
        "execution.state-recovery.ignore-unclaimed-state": "true",
    }
    env = env_for(1, 300, extra=extra)
    # A keyed map after the old one: an operator of its own (PyFlink fuses consecutive Python
    # maps into one), so every operator after it gets another generated identity.
    upgraded = record_stream(env, count, record).map(UNPACED).key_by(lambda r: r["i"] % 2)
    upgraded = upgraded.map(lambda r: r)
    upgraded.sink_to(StagingSink(str(tmp_path)))
    env.execute("after the upgrade")

    [restored] = [c for c in steps(tmp_path, "commit") if c["restored"]]
    assert prepared <= set(restored["ids"]), (prepared, restored)
    assert_exactly_once(tmp_path, count)
