"""The writer function the job wiring picks for each operator shape, and what it hands the
bridge's marker operator to keep (core/operators.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.lineage import (
    LINEAGE_STATE_PARAMETER,
    LINEAGE_STATE_TAG,
    LineageSettings,
    as_listener,
)
from pyflink_gcp.core.operators import (
    BARE_MARKER_WATERMARK,
    END_OF_INPUT,
    MARKER_TAG,
    MarkedWriterProcessFunction,
    TypedMarkedWriterProcessFunction,
    WriterProcessFunction,
    bare_marker_id,
    writer_function,
)
from pyflink_gcp.core.result_stream import (
    ResultsWriterFunction,
    TypedResultsWriterFunction,
)
from pyflink_gcp.core.sink_writer import SinkConfig
from tests.support.fakes import FileDestination, FileSink, WatermarkContext
from tests.unit.core.test_lineage import _kept
from tests.unit.core.test_metrics import Group


def _config(write_results: bool = False) -> SinkConfig:
    return SinkConfig(
        sink_name="s",
        factory=None,  # type: ignore[arg-type]
        resolver=lambda record: "t",
        serializer=lambda record: record,
        write_results=write_results,
    )


@pytest.mark.parametrize(
    ("marked", "typed", "results", "expected"),
    [
        (False, False, False, WriterProcessFunction),
        (False, True, False, WriterProcessFunction),
        (True, False, False, MarkedWriterProcessFunction),
        (True, True, False, TypedMarkedWriterProcessFunction),
        (True, False, True, ResultsWriterFunction),
        (True, True, True, TypedResultsWriterFunction),
    ],
)
def test_each_operator_shape_gets_its_writer_function(
    marked: bool, typed: bool, results: bool, expected: type[WriterProcessFunction]
) -> None:
    function = writer_function(_config(results), marked=marked, typed=typed)

    assert type(function) is expected


@pytest.mark.parametrize(
    ("watermark", "expected"),
    [
        (BARE_MARKER_WATERMARK, 0),
        (BARE_MARKER_WATERMARK + 1, 1),
        (BARE_MARKER_WATERMARK + 123_456, 123_456),
        (BARE_MARKER_WATERMARK - 1, END_OF_INPUT),
        # Ordinary watermarks: none yet, event times (negative ones too), the end of time.
        (-(2**63), None),
        (0, None),
        (-86_400_000, None),
        (1_700_000_000_000, None),
        (2**63 - 1, None),
        (BARE_MARKER_WATERMARK - 2, None),
        (BARE_MARKER_WATERMARK + 2**40, None),
    ],
)
def test_an_element_without_a_value_is_a_marker_only_by_its_watermark(
    watermark: int, expected: int | None
) -> None:
    assert bare_marker_id(None, WatermarkContext(watermark)) == expected


def test_an_element_with_a_value_is_a_record_whatever_its_watermark() -> None:
    assert bare_marker_id("record", WatermarkContext(BARE_MARKER_WATERMARK + 3)) is None


def test_the_typed_writer_writes_records_and_flushes_at_markers_it_tells_from_none() -> None:
    function = writer_function(_config(), marked=True, typed=True)
    seen: list[Any] = []
    function._write = lambda value, ctx: seen.append(("record", value))  # type: ignore[method-assign]
    function._on_marker = lambda marker: seen.append(("marker", marker))  # type: ignore[method-assign]
    ordinary = WatermarkContext(1_700_000_000_000)

    function.process_element(5, ordinary)
    function.process_element(None, WatermarkContext(BARE_MARKER_WATERMARK + 7))
    function.process_element(None, ordinary)
    function.process_element(None, WatermarkContext(BARE_MARKER_WATERMARK - 1))

    assert seen == [("record", 5), ("marker", 7), ("record", None), ("marker", END_OF_INPUT)]


def test_the_function_carries_the_sinks_config() -> None:
    config = _config()

    function = writer_function(config, marked=True, typed=False)

    assert function._config is config


def test_results_without_markers_are_refused_naming_the_function() -> None:
    with pytest.raises(ConfigurationError, match="checkpoint-marker writer"):
        writer_function(_config(write_results=True), marked=False, typed=False)


# -- lineage across restores: the marker operator's state -----------------------------------


class _Gauges(Group):
    """A metric group that also takes gauges (bookkeeping only)."""

    def gauge(self, name: str, read: Any) -> None:
        pass

    def add_group(self, name: str, extra: str | None = None) -> Any:
        return _Gauges((*self.scope, name))


class _RuntimeContext:
    """PyFlink's RuntimeContext as the writer's open() reads it; ``parameters`` are the job
    parameters, where the bridge's marker operator puts its lineage state."""

    def __init__(self, parameters: dict[str, str]) -> None:
        self.parameters = parameters

    def get_metrics_group(self) -> Any:
        return _Gauges()

    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_number_of_parallel_subtasks(self) -> int:
        return 1

    def get_attempt_number(self) -> int:
        return 1

    def get_task_name(self) -> str:
        return "file-sink: Writer"

    def get_job_parameter(self, key: str, default: Any) -> Any:
        return self.parameters.get(key, default)


class _Ctx:
    def timestamp(self) -> int:
        return 42

    def timer_service(self) -> Any:
        return self

    def current_watermark(self) -> int:
        return 0


def _files(d: str) -> tuple[str, str]:
    return ("gcp", f"files/{d}")


@pytest.mark.parametrize(
    ("parameters", "reported", "kept"),
    [
        # Restored: the subtask had reported files/a before the checkpoint.
        ({LINEAGE_STATE_PARAMETER: _kept((LINEAGE_STATE_TAG, (_files("a"),), False))}, ["b"], True),
        # A first start under the marker operator: nothing kept yet.
        ({LINEAGE_STATE_PARAMETER: ""}, ["a", "b"], True),
        # PyFlink's own operator (no bridge): no state, no element in the output.
        ({}, ["a", "b"], False),
    ],
    ids=["restored", "first-start", "no-state"],
)
def test_the_marker_hands_the_operator_the_datasets_reported_since_the_last_one(
    tmp_path: Path, parameters: dict[str, str], reported: list[str], kept: bool
) -> None:
    seen: list[str] = []
    sink = FileSink(
        str(tmp_path),
        lambda r, c: FileDestination.of(r["d"]),
        lineage=LineageSettings(as_listener(lambda dataset: seen.append(dataset.name))),
    )
    function = MarkedWriterProcessFunction(sink._sink_config())
    function.open(_RuntimeContext(parameters))  # type: ignore[arg-type]
    try:
        for d in ["a", "b", "a"]:
            assert function.process_element({"d": d}, _Ctx()) is None
        out = function.process_element((MARKER_TAG, 5), None)
        assert seen == [f"files/{d}" for d in reported]
        if kept:
            assert out == [(LINEAGE_STATE_TAG, tuple(_files(d) for d in reported), False)]
        else:
            assert out is None
        # Nothing new by the next marker: nothing to keep.
        function.process_element({"d": "b"}, _Ctx())
        assert function.process_element((MARKER_TAG, 6), None) is None
    finally:
        function.close()
