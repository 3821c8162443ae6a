"""The function wrapper that lets markers pass the Python functions fused into the writer.

The wiring (which operators are taken in, the job graph) is in ``test_runtime.py``; jobs that
run it are in ``tests/e2e/core/test_checkpoint_markers.py``.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
from pyflink.datastream.functions import ProcessFunction

from pyflink_gcp.core.fusion import MarkerPassingFunction
from pyflink_gcp.core.operators import BARE_MARKER_WATERMARK
from tests.support.fakes import WatermarkContext

TAG = "\x00test:checkpoint"


class Doubling(ProcessFunction):
    """Records its lifecycle so the test sees the wrapper pass it on."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def open(self, runtime_context: Any) -> None:
        self.calls.append(("open", runtime_context))

    def process_element(self, value: Any, ctx: Any):
        self.calls.append(("record", value, ctx))
        yield value * 2

    def close(self) -> None:
        self.calls.append(("close",))


def opened(typed: bool) -> MarkerPassingFunction:
    function = MarkerPassingFunction(cloudpickle.dumps(Doubling()), TAG, typed)
    function.open("runtime context")
    return function


def test_records_go_through_the_function_and_markers_past_it() -> None:
    function = opened(typed=False)
    assert list(function.process_element(21, "ctx")) == [42]
    assert list(function.process_element((TAG, 7), "ctx")) == [(TAG, 7)]
    # A record that merely looks like a marker (another tag, or three items) is a record.
    assert list(function.process_element(("x", 7), "ctx")) == [("x", 7, "x", 7)]
    assert list(function.process_element((TAG, 7, 1), "ctx")) == [(TAG, 7, 1, TAG, 7, 1)]
    function.close()
    inner = function._function
    assert inner.calls[0] == ("open", "runtime context")
    assert [c[1] for c in inner.calls if c[0] == "record"] == [21, ("x", 7), (TAG, 7, 1)]
    assert inner.calls[-1] == ("close",)


def test_the_head_of_a_typed_input_turns_markers_into_tuples_and_passes_records_on() -> None:
    function = opened(typed=True)
    no_watermark = WatermarkContext(-(2**63))
    assert list(function.process_element(5, no_watermark)) == [10]
    # A marker is an element without a value whose watermark says it is one; it leaves as the
    # tuple the writer after it looks for.
    assert list(function.process_element(None, WatermarkContext(BARE_MARKER_WATERMARK + 3))) == [
        (TAG, 3)
    ]
    assert list(function.process_element(None, WatermarkContext(BARE_MARKER_WATERMARK - 1))) == [
        (TAG, -1)
    ]
    # A record that is None under an ordinary watermark is a record.
    function._function.process_element = lambda value, ctx: [("record", value)]
    assert function.process_element(None, WatermarkContext(1_700_000_000_000)) == [("record", None)]
    assert function.process_element(None, no_watermark) == [("record", None)]
    assert [c[1] for c in function._function.calls if c[0] == "record"] == [5]


def test_the_function_is_unpickled_on_open_and_a_never_opened_one_closes_quietly() -> None:
    function = MarkerPassingFunction(cloudpickle.dumps(Doubling()), TAG, False)
    assert function._function is None
    function.close()
    roundtrip = cloudpickle.loads(cloudpickle.dumps(function))
    roundtrip.open(None)
    assert isinstance(roundtrip._function, Doubling)


def test_the_fused_operator_bundles_are_no_longer_than_the_jobs_nor_the_writers() -> None:
    """A slow function taken in must not run in the writer's large bundles (a barrier waits for
    the whole bundle), and a writer's smaller thresholds still win."""
    from pyflink.java_gateway import get_gateway

    from pyflink_gcp.core.fusion import bundle_configuration

    jvm = get_gateway().jvm

    def bounded(writer: tuple[int, int], job: tuple[int, int] | None) -> tuple[str, str]:
        writer_conf = jvm.org.apache.flink.configuration.Configuration()
        writer_conf.setString("python.fn-execution.bundle.size", str(writer[0]))
        writer_conf.setString("python.fn-execution.bundle.time", str(writer[1]))
        job_conf = jvm.org.apache.flink.configuration.Configuration()
        if job is not None:
            job_conf.setString("python.fn-execution.bundle.size", str(job[0]))
            job_conf.setString("python.fn-execution.bundle.time", str(job[1]))

        class Env:
            def getConfiguration(self) -> Any:
                return job_conf

        conf = bundle_configuration(writer_conf, Env())
        return (
            conf.getString("python.fn-execution.bundle.size", ""),
            conf.getString("python.fn-execution.bundle.time", ""),
        )

    assert bounded((20_000, 1_000), None) == ("1000", "1000")  # PyFlink's defaults
    assert bounded((20_000, 1_000), (5, 200)) == ("5", "200")
    assert bounded((100, 300), (5_000, 2_000)) == ("100", "300")
