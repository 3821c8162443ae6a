"""The writer function the job wiring picks for each operator shape (core/operators.py)."""

from __future__ import annotations

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.operators import (
    MarkedWriterProcessFunction,
    TypedMarkedWriterProcessFunction,
    WriterProcessFunction,
    writer_function,
)
from pyflink_gcp.core.result_stream import ResultsWriterFunction, TypedResultsWriterFunction
from pyflink_gcp.core.sink_writer import SinkConfig


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


def test_the_function_carries_the_sinks_config() -> None:
    config = _config()

    function = writer_function(config, marked=True, typed=False)

    assert function._config is config


def test_results_without_markers_are_refused_naming_the_function() -> None:
    with pytest.raises(ConfigurationError, match="checkpoint-marker writer"):
        writer_function(_config(write_results=True), marked=False, typed=False)
