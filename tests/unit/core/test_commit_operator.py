"""The committer operator's wiring: its stable uid (the only state a restore must find), read
from the stream graph a job would run."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pyflink_gcp.core import bridge
from tests.support.committing import StagingSink
from tests.unit.core.test_runtime import pipeline


@pytest.fixture(scope="module", autouse=True)
def jar() -> None:
    if bridge.bridge_jar() is None:
        pytest.skip("no bridge jar and no JDK to build one")


def uids(env: Any) -> dict[str, str | None]:
    """Operator name -> uid, from the stream graph the job would run."""
    graph = env._generate_stream_graph(False)
    return {n.getOperatorName(): n.getTransformationUID() for n in graph.getStreamNodes().toArray()}


def sink(uid: str | None = None, name: str = "staging-sink") -> StagingSink:
    s = StagingSink("/nonexistent")
    s._config.uid = uid
    s._config.sink_name = name
    return s


@pytest.mark.parametrize("uid", [None, "orders"])
def test_the_committer_keeps_its_uid_when_an_operator_is_added_upstream(uid) -> None:
    """Without a stable uid an added upstream operator changes the committer's identity, and
    a restore (with --allowNonRestoredState) drops the committables of the last checkpoint."""
    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink(uid))
    before = uids(env)
    env, ds = pipeline(keyed=False, typed=False)
    ds.map(lambda r: r).sink_to(sink(uid))
    after = uids(env)

    expected = f"{uid}-committer" if uid else "pyflink-gcp-staging-sink-committer"
    assert before["staging-sink: Committer"] == after["staging-sink: Committer"] == expected
    # Fused with the map before it by default, the writer keeps its own uid.
    [writer] = [name for name in before if name.endswith("staging-sink: Writer")]
    assert before[writer] == (f"{uid}-writer" if uid else None)


def test_two_exactly_once_sinks_of_one_name_warn_and_the_second_gets_no_uid(caplog) -> None:
    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink())
    with caplog.at_level(logging.WARNING, logger="pyflink_gcp.runtime"):
        ds.sink_to(sink())
    assert "set_uid" in caplog.text
    graph = env._generate_stream_graph(False)
    committers = [
        n.getTransformationUID()
        for n in graph.getStreamNodes().toArray()
        if n.getOperatorName() == "staging-sink: Committer"
    ]
    assert sorted(committers, key=str) == sorted(
        ["pyflink-gcp-staging-sink-committer", None], key=str
    )


def test_two_sinks_with_their_own_uids_each_keep_theirs() -> None:
    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink("a", name="s"))
    ds.sink_to(sink("b", name="s"))
    graph = env._generate_stream_graph(False)
    committers = {
        n.getTransformationUID()
        for n in graph.getStreamNodes().toArray()
        if n.getOperatorName() == "s: Committer"
    }
    assert committers == {"a-committer", "b-committer"}


def test_a_committer_of_parallelism_one_waits_for_every_writer_of_its_attempt() -> None:
    from pyflink_gcp.core.commit import WriterStarted
    from pyflink_gcp.core.commit_operator import WriterFences

    fences = WriterFences(attempt=2, committer_parallelism=1)
    assert not fences.announce(
        [WriterStarted(0, 3, 1)], restored=False, final=False
    )  # an earlier attempt's
    assert not fences.announce(
        [WriterStarted(0, 3, 2)], restored=True, final=False
    )  # restored: not this one
    assert not fences.announce(["x", WriterStarted(0, 3, 2)], restored=False, final=False)
    assert not fences.announce([WriterStarted(2, 3, 2)], restored=False, final=False)
    assert fences.announce([WriterStarted(1, 3, 2), "y"], restored=False, final=False)


def test_a_committer_fed_by_one_writer_waits_for_that_one() -> None:
    from pyflink_gcp.core.commit import WriterStarted
    from pyflink_gcp.core.commit_operator import WriterFences

    fences = WriterFences(attempt=0, committer_parallelism=4)
    assert fences.announce([WriterStarted(3, 4, 0)], restored=False, final=False)


def test_the_committer_gets_no_fence_and_hears_once_that_the_writers_started() -> None:
    from pyflink_gcp.core.commit import MODE_COMPLETED, MODE_FINAL, WriterStarted
    from pyflink_gcp.core.commit_operator import CommitterProcessFunction, WriterFences

    class Recording:
        def __init__(self) -> None:
            self.sets: list[list[Any]] = []
            self.started = 0

        def commit(self, committables: list[Any], *args: Any) -> list[Any]:
            self.sets.append(committables)
            return []

        def writers_started(self) -> None:
            self.started += 1

    function = CommitterProcessFunction(sink()._config)
    committer = Recording()
    function._committer = committer  # type: ignore[assignment]
    function._writers = WriterFences(attempt=0, committer_parallelism=1)
    for value in ("a", WriterStarted(0, 1, 0), "b"):
        function.process_element(value, None)
    function._commit(5, MODE_COMPLETED)
    function._commit(6, MODE_FINAL)
    assert committer.sets == [["a", "b"], []]
    assert committer.started == 1
