"""Write results: the per-destination aggregates, when the writer and the committer emit them,
and the wiring of ``write_with_results`` (the stream graph a job would run)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pyflink_gcp.core import ConfigurationError, FailureHandler, SubtaskInfo
from pyflink_gcp.core.commit import MODE_COMPLETED, MODE_FINAL, WriterStarted
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.results import (
    AT_LEAST_ONCE,
    ResultCollector,
    WriteResult,
    merge_results,
    release_results,
    write_method,
)
from pyflink_gcp.core.sink_writer import SinkWriter
from tests.support.committing import StagingSink
from tests.support.fakes import FileDestination, FileSink


def result(dest: str, checkpoint: int, count: int, first: int | None, last: int | None):
    return WriteResult("s", dest, checkpoint, count, first, last, "FILE_LOADS", 0)


# -- the aggregates ---------------------------------------------------------------------------


def test_the_collector_counts_per_destination_and_bounds_event_times() -> None:
    collector = ResultCollector("orders", AT_LEAST_ONCE, subtask=1)
    a, b = FileDestination.of("a"), FileDestination.of("b")
    for destination, timestamp in ((a, 30), (a, None), (a, 10), (b, None), (a, 20)):
        collector.add(destination, timestamp)
    results = {r.destination: r for r in collector.take(7)}
    assert results["files/a"] == WriteResult("orders", "files/a", 7, 4, 10, 30, AT_LEAST_ONCE, 1)
    assert results["files/b"].count == 1
    assert (results["files/b"].first_event_time, results["files/b"].last_event_time) == (None, None)
    assert not results["files/a"].exactly_once
    assert collector.take(8) == [] and len(collector) == 0  # each checkpoint starts anew


def test_failed_records_are_not_counted_and_a_destination_that_only_failed_has_no_result() -> None:
    collector = ResultCollector("orders", AT_LEAST_ONCE)
    for _ in range(3):
        collector.add(FileDestination.of("a"), 5)
    collector.add(FileDestination.of("b"), 6)
    collector.failed("files/a")
    collector.failed("files/b")
    collector.failed("unresolved")
    assert [(r.destination, r.count) for r in collector.take(1)] == [("files/a", 2)]


def test_merging_sums_the_subtasks_of_one_checkpoint_and_keeps_checkpoints_apart() -> None:
    merged = merge_results(
        [
            result("t1", 5, 3, 100, 200),
            result("t1", 5, 2, 50, None),
            result("t2", 5, 1, None, None),
            result("t1", 6, 4, 300, 400),
        ],
        subtask=0,
    )
    assert [(r.destination, r.checkpoint_id, r.count) for r in merged] == [
        ("t1", 5, 5),
        ("t2", 5, 1),
        ("t1", 6, 4),
    ]
    assert (merged[0].first_event_time, merged[0].last_event_time) == (50, 200)
    assert (merged[1].first_event_time, merged[1].last_event_time) == (None, None)


def test_end_of_input_results_become_the_committing_checkpoints() -> None:
    merged = merge_results(
        [result("t1", -1, 2, 1, 2), result("t1", 9, 3, 3, 4), result("t1", 8, 1, 0, 0)],
        subtask=0,
        checkpoint_id=9,
    )
    assert [(r.checkpoint_id, r.count) for r in merged] == [(9, 5), (8, 1)]


def test_results_of_destinations_with_kept_work_wait_with_it() -> None:
    results = [result("t1", 5, 1, None, None), result("t2", 5, 1, None, None)]
    assert release_results(results, set(), kept=False) == (results, [])
    assert release_results(results, {"t2"}, kept=True) == ([results[0]], [results[1]])
    # A committer that cannot tell which destinations wait holds every result back.
    assert release_results(results, None, kept=True) == ([], results)


def test_the_method_is_at_least_once_unless_the_sink_commits() -> None:
    assert write_method(FileSink("/nonexistent", None)._sink_config()) == AT_LEAST_ONCE
    config = StagingSink("/nonexistent")._sink_config()
    assert write_method(config) == "StagingFactory"
    config = dataclasses.replace(config, requires_bridge="WriteMethod.FILE_LOADS")
    assert write_method(config) == "FILE_LOADS"


# -- the writer --------------------------------------------------------------------------------


def by_region(record: dict[str, Any], ctx: Any) -> FileDestination:
    return FileDestination.of(record["region"])


def results_writer(tmp_path: Any, handler: FailureHandler) -> SinkWriter:
    sink = FileSink(str(tmp_path), by_region, failure_handler=handler)
    config = dataclasses.replace(sink._sink_config(), write_results=True)
    writer = SinkWriter(config)
    writer.open(SubtaskInfo("file-sink", subtask_index=1))
    return writer


def test_without_write_results_the_writer_keeps_no_aggregates(tmp_path: Any) -> None:
    writer = SinkWriter(FileSink(str(tmp_path), by_region)._sink_config())
    assert writer.results is None


def test_the_writer_counts_what_a_flush_made_durable_and_hands_failures_to_the_stream(
    tmp_path: Any,
) -> None:
    writer = results_writer(tmp_path, FailureHandler.to_stream())
    for i, (region, reject) in enumerate((("a", False), ("a", True), ("a", False), ("b", False))):
        writer.context._set_time(1_000 + i, None)
        writer.write({"region": region, "i": i, "reject": reject})
    writer.flush()
    assert writer.results is not None
    results = {r.destination: r for r in writer.results.take(3)}
    assert results["files/a"] == WriteResult(
        "file-sink", "files/a", 3, 2, 1_000, 1_002, AT_LEAST_ONCE, 1
    )
    assert results["files/b"].count == 1
    failed = writer.router.take_pending()
    assert [f.destination for f in failed] == ["files/a"] and writer.router.streamed == 1
    assert writer.router.take_pending() == []


def test_the_marker_function_emits_results_and_failed_records_to_their_side_outputs(
    tmp_path: Any,
) -> None:
    from pyflink_gcp.core.operators import MARKER_TAG
    from pyflink_gcp.core.result_stream import ResultsWriterFunction

    config = dataclasses.replace(
        FileSink(
            str(tmp_path), by_region, failure_handler=FailureHandler.to_stream()
        )._sink_config(),
        write_results=True,
    )
    function = ResultsWriterFunction(config)
    function._writer = results_writer(tmp_path, FailureHandler.to_stream())
    assert function.process_element({"region": "a", "i": 0}, _Ctx()) is None
    assert function.process_element({"region": "a", "i": 1, "reject": True}, _Ctx()) is None
    out = function.process_element((MARKER_TAG, 4), None)
    assert out is not None
    tags = {tag.tag_id: value for tag, value in out}
    assert set(tags) == {"file-sink: write results", "file-sink: failed records"}
    assert tags["file-sink: write results"].count == 1
    assert tags["file-sink: write results"].checkpoint_id == 4
    assert isinstance(tags["file-sink: failed records"], FailedRecord)
    # A failure a flush between markers found leaves with the next record.
    function._writer.write({"region": "b", "reject": True})
    function._writer.flush()
    out = function.process_element({"region": "b", "i": 2}, _Ctx())
    assert out is not None and [t.tag_id for t, _ in out] == ["file-sink: failed records"]


class _Ctx:
    def timestamp(self) -> int:
        return 42

    def timer_service(self) -> Any:
        return self

    def current_watermark(self) -> int:
        return 0


# -- the committer ----------------------------------------------------------------------------


class KeepingCommitter:
    """Keeps what ``keep`` names, for destinations it says wait."""

    def __init__(self) -> None:
        self.sets: list[list[Any]] = []
        self.keep: list[Any] = []

    def commit(self, committables: list[Any], *args: Any) -> list[Any]:
        self.sets.append(committables)
        kept, self.keep = self.keep, []
        return kept

    def waiting(self, kept: list[Any]) -> set[str]:
        return {k.split(":")[0] for k in kept}

    def writers_started(self) -> None:
        pass


def committer_function(write_results: bool) -> tuple[Any, KeepingCommitter]:
    from pyflink_gcp.core.commit_operator import CommitterProcessFunction, WriterFences

    config = dataclasses.replace(StagingSink("/nonexistent")._config, write_results=write_results)
    function = CommitterProcessFunction(config)
    committer = KeepingCommitter()
    function._committer = committer  # type: ignore[assignment]
    function._writers = WriterFences(attempt=0, committer_parallelism=1)
    return function, committer


def test_the_committer_emits_results_after_the_commit_and_holds_those_of_kept_work() -> None:
    function, committer = committer_function(write_results=True)
    for value in (
        "t1:file-1",
        result("t1", 5, 2, 10, 20),
        WriterStarted(0, 1, 0),
        "t2:file-2",
        result("t2", 5, 3, None, None),
        result("t1", 5, 1, 5, 15),
    ):
        function.process_element(value, None)
    committer.keep = ["t2:file-2"]
    out = function._commit(5, MODE_COMPLETED)
    assert committer.sets == [["t1:file-1", "t2:file-2"]]  # the committer never sees results
    emitted = [value for value in out if type(value) is tuple]
    kept = [value for value in out if type(value) is not tuple]
    assert [(tag.tag_id, r.destination, r.count) for tag, r in emitted] == [
        ("staging-sink: write results", "t1", 3)
    ]
    assert (emitted[0][1].first_event_time, emitted[0][1].last_event_time) == (5, 20)
    # The kept work and its result come back with the next set, and are emitted after it.
    assert kept == ["t2:file-2", result("t2", 5, 3, None, None)]
    for value in kept:
        function.process_element(value, None)
    out = function._commit(6, MODE_FINAL)
    assert [(r.destination, r.checkpoint_id, r.count) for _, r in out] == [("t2", 5, 3)]


def test_a_commit_after_the_operators_finished_logs_its_results_instead_of_emitting_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pyflink_gcp.core.commit import COMMIT_TAG
    from pyflink_gcp.core.commit_operator import MODE_AFTER_FINISH

    function, committer = committer_function(write_results=True)
    for value in ("t1:file-1", result("t1", -1, 4, 10, 20), "t2:file-2", result("t2", 7, 2, 1, 2)):
        function.process_element(value, None)
    committer.keep = ["t2:file-2"]
    caplog.set_level("INFO", logger="pyflink_gcp.runtime")
    # The Java committer adds the flag to the mode: this is a completed checkpoint's set.
    out = function.process_element((COMMIT_TAG, 7, MODE_COMPLETED | MODE_AFTER_FINISH), None)
    assert committer.sets == [["t1:file-1", "t2:file-2"]]
    # Kept work keeps its result (the final commit below logs it); nothing is emitted.
    assert out == ["t2:file-2", result("t2", 7, 2, 1, 2)]
    logged = [r.getMessage() for r in caplog.records if "after the operators finished" in r.message]
    assert logged == [
        "staging-sink: committed 4 records to t1 (checkpoint 7) after the operators finished: "
        "Flink delivers this write result to no operator"
    ]
    for value in out:
        function.process_element(value, None)
    # The flag does not hide the mode: this is the final commit, which keeps nothing.
    assert function.process_element((COMMIT_TAG, 7, MODE_FINAL | MODE_AFTER_FINISH), None) is None
    assert committer.sets[-1] == ["t2:file-2"]
    assert "2 records to t2 (checkpoint 7)" in caplog.records[-1].getMessage()


def test_without_write_results_the_committer_returns_only_what_it_keeps() -> None:
    function, committer = committer_function(write_results=False)
    function.process_element("t1:file-1", None)
    committer.keep = ["t1:file-1"]
    assert function._commit(5, MODE_COMPLETED) == ["t1:file-1"]
    assert function._commit(6, MODE_FINAL) is None


# -- the failure handler and the wiring -------------------------------------------------------


def test_the_to_stream_handler() -> None:
    handler = FailureHandler.to_stream()
    assert handler.streams_failures and not FailureHandler.log_and_drop().streams_failures
    assert repr(handler) == "FailureHandler.to_stream()"


@pytest.fixture(scope="module")
def jar() -> None:
    from pyflink_gcp.core import bridge

    if bridge.bridge_jar() is None:
        pytest.skip("no bridge jar and no JDK to build one")


def operators(env: Any) -> list[str]:
    graph = env._generate_stream_graph(False)
    return sorted(n.getOperatorName() for n in graph.getStreamNodes().toArray())


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("committing", [False, True], ids=["at least once", "exactly once"])
def test_write_with_results_returns_the_results_stream_and_keeps_sink_to_as_it_was(
    committing: bool,
) -> None:
    from pyflink_gcp.core.result_stream import WriteResultStream
    from tests.unit.core.test_runtime import pipeline

    def make() -> Any:
        if committing:
            return StagingSink("/nonexistent")
        return FileSink("/nonexistent", by_region, failure_handler=FailureHandler.to_stream())

    env, ds = pipeline(keyed=False, typed=False)
    results = make().write_with_results(ds)
    assert isinstance(results, WriteResultStream)
    results.map(lambda r: r.count)
    if not committing:
        results.failed().map(lambda f: f.reason)
    names = operators(env)
    name = make().name

    def has(prefix: str) -> bool:
        return any(n.startswith(prefix) for n in names)

    assert f"{name}: Writer" in names
    assert has(f"{name}: Write results")  # the side output, chained with the map after it
    # Both side outputs exist whether the job reads them or not.
    assert has(f"{name}: write results (discarded)") and has(f"{name}: failed records (disc")
    assert (f"{name}: Committer" in names) == committing
    assert has(f"{name}: Failed records") != committing

    env, ds = pipeline(keyed=False, typed=False)
    plain = StagingSink("/nonexistent") if committing else FileSink("/nonexistent", by_region)
    ds.sink_to(plain)
    assert not [n for n in operators(env) if "results" in n or "failed" in n]


@pytest.mark.usefixtures("jar")
def test_write_with_results_refuses_a_writer_without_markers_and_sink_to_the_stream_handler() -> (
    None
):
    from tests.unit.core.test_runtime import pipeline

    env, ds = pipeline(keyed=False, typed=False)
    with pytest.raises(ConfigurationError, match=r"write_with_results\(\) needs the writer"):
        FileSink("/nonexistent", by_region, checkpoint_markers=False).write_with_results(ds)
    with pytest.raises(ConfigurationError, match=r"sink.write_with_results\(ds\).failed\(\)"):
        ds.sink_to(FileSink("/nonexistent", by_region, failure_handler=FailureHandler.to_stream()))
    stream = FileSink("/nonexistent", by_region).write_with_results(ds)
    with pytest.raises(ConfigurationError, match=r"FailureHandler.to_stream\(\)"):
        stream.failed()
