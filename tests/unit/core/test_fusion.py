"""The function wrapper that lets markers pass the Python functions fused into the writer.

The wiring (which operators are taken in, the job graph) is in ``test_runtime.py``; jobs that
run it are in ``tests/e2e/core/test_checkpoint_markers.py``.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
from pyflink.common import Row
from pyflink.datastream.functions import ProcessFunction

from pyflink_gcp.core.fusion import MarkerPassingFunction

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


def test_the_head_of_a_typed_input_unwraps_records_and_turns_markers_into_tuples() -> None:
    function = opened(typed=True)
    assert list(function.process_element(Row(None, 5), "ctx")) == [10]
    # The marker row (id, None) leaves as the tuple the writer after it looks for.
    assert list(function.process_element(Row(3, None), "ctx")) == [(TAG, 3)]
    assert list(function.process_element(Row(-1, None), "ctx")) == [(TAG, -1)]
    assert [c[1] for c in function._function.calls if c[0] == "record"] == [5]


def test_the_function_is_unpickled_on_open_and_a_never_opened_one_closes_quietly() -> None:
    function = MarkerPassingFunction(cloudpickle.dumps(Doubling()), TAG, False)
    assert function._function is None
    function.close()
    roundtrip = cloudpickle.loads(cloudpickle.dumps(function))
    roundtrip.open(None)
    assert isinstance(roundtrip._function, Doubling)
