"""The writer fused with the Python functions before it, checkpoint markers kept.

PyFlink fuses consecutive Python operators itself, when the job is executed
(``PythonOperatorChainingOptimizer``): the fused operator is a copy of the *first* operator of
the chain, running the later functions after it. A writer fused that way loses the bridge's
marker operator, so every bundle end has to wait for every write. And a marker cannot simply go
into a fused operator's input either: the first function of the chain (the user's map) would
receive it.

So ``set_chain_with_upstream()`` fuses here instead, when the job is built: the Python
functions right before the writer (plain, not keyed, process-mode or thread-mode ``map``,
``flat_map``, ``filter`` or ``process`` with no side outputs, the same parallelism, feeding
nothing else) are taken out of the job and run inside the writer's own marker operator, each
wrapped in a :class:`MarkerPassingFunction` that hands markers on to the next function
untouched. The records then cross from the JVM to Python once, as in PyFlink's fusion, and the
writer still waits only at markers, with its own flush thresholds as its operator's bundle
settings.

The limit: a stream whose functions were taken in feeds only the writer. An operator that reads
the same stream added *after* ``sink_to`` (or a side output read after it) runs those functions
once more, in their own operator, since nothing here can see it; consume such a stream before
``sink_to``, or leave the sink in a chain of its own.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from pyflink.datastream.functions import ProcessFunction, RuntimeContext

#: The Python operators whose functions the writer can take in: the plain process operators
#: PyFlink's ``map``, ``flat_map``, ``filter`` and ``process`` build, in either execution mode.
FUSABLE_OPERATORS = frozenset(
    {
        "org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator",
        "org.apache.flink.streaming.api.operators.python.embedded.EmbeddedPythonProcessOperator",
    }
)
_ONE_INPUT = "org.apache.flink.streaming.api.transformations.OneInputTransformation"
_PARTITION = "org.apache.flink.streaming.api.transformations.PartitionTransformation"
_FORWARD = "org.apache.flink.streaming.runtime.partitioner.ForwardPartitioner"
_SIMPLE_FACTORY = "org.apache.flink.streaming.api.operators.SimpleOperatorFactory"
_PYTHON_OPERATOR = (
    "org.apache.flink.streaming.api.operators.python.DataStreamPythonFunctionOperator"
)


class MarkerPassingFunction(ProcessFunction):
    """A Python function taken into the writer's operator: records go to it, markers past it.

    The function travels pickled as PyFlink pickled it and is unpickled on the worker when the
    operator opens, as PyFlink would have done.

    Args:
        payload: The function as PyFlink serialized it (``cloudpickle``).
        tag: The first item of a pickled marker ``(tag, checkpoint id)``.
        typed: Whether this function heads the operator on a typed input: every element is
            then the row ``(marker, record)`` the marker operator wraps records in, and a
            marker leaves as the pickled-style tuple the functions after it expect.
    """

    def __init__(self, payload: bytes, tag: str, typed: bool) -> None:
        self._payload = payload
        self._tag = tag
        self._typed = typed
        self._function: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self._function = pickle.loads(self._payload)
        if hasattr(self._function, "open"):
            self._function.open(runtime_context)

    def process_element(self, value: Any, ctx: Any) -> Any:
        if self._typed:
            marker = value[0]
            if marker is None:
                return self._function.process_element(value[1], ctx)
            return ((self._tag, marker),)
        if type(value) is tuple and len(value) == 2 and value[0] == self._tag:
            return (value,)
        return self._function.process_element(value, ctx)

    def close(self) -> None:
        if self._function is not None and hasattr(self._function, "close"):
            self._function.close()


@dataclass
class Upstream:
    """The Python operators right before the writer that it can take in, last one first.

    Attributes:
        transformations: Their Java transformations, the one feeding the writer first.
        input: The Java transformation feeding the first of them: the fused operator's input.
    """

    transformations: list[Any] = field(default_factory=list)
    input: Any = None

    def names(self) -> str:
        """Their names in the order they run, as PyFlink names what it fused."""
        return ", ".join(t.getName() for t in reversed(self.transformations))

    @property
    def first(self) -> Any:
        """The transformation that fed the writer: its parallelism and uid carry over."""
        return self.transformations[0]


def fusable_upstream(j_env: Any, j_transformation: Any) -> Upstream | None:
    """The Python functions the writer after ``j_transformation`` can take in, or None.

    Walks up from the writer's input while each transformation is a fusable Python operator
    (:data:`FUSABLE_OPERATORS`, a function of its own with no side outputs, the first one's
    parallelism, maximum parallelism and slot sharing group) that nothing else in the job reads.
    """
    consumers = _consumers(j_env)
    upstream = Upstream()
    current = j_transformation
    while _fusable(current, upstream, consumers):
        upstream.transformations.append(current)
        current = current.getInputs().get(0)
    if not upstream.transformations:
        return None
    upstream.input = current
    return upstream


def is_python_operator(j_transformation: Any) -> bool:
    """Whether PyFlink's optimizer would try to fuse the operator after this one into it: a
    Python operator, possibly behind forward partitionings, as the optimizer looks."""
    from pyflink.java_gateway import get_gateway

    while j_transformation.getClass().getName() == _PARTITION and (
        j_transformation.getPartitioner().getClass().getName() == _FORWARD
    ):
        j_transformation = j_transformation.getInputs().get(0)
    operator = _operator(j_transformation)
    if operator is None:
        return False
    python_operator = get_gateway().jvm.java.lang.Class.forName(_PYTHON_OPERATOR)
    return bool(python_operator.isInstance(operator))


def _operator(j_transformation: Any) -> Any:
    """The operator of a one-input transformation built from an operator instance, or None."""
    from pyflink.java_gateway import get_gateway

    if j_transformation.getClass().getName() != _ONE_INPUT:
        return None
    factory = j_transformation.getOperatorFactory()
    simple = get_gateway().jvm.java.lang.Class.forName(_SIMPLE_FACTORY)
    return factory.getOperator() if simple.isInstance(factory) else None


def chain_info(upstream: Upstream, writer_info: Any, tag: str, typed: bool) -> Any:
    """The writer's function info with the upstream functions, wrapped, as its inputs.

    Args:
        upstream: What :func:`fusable_upstream` found.
        writer_info: The writer function's ``DataStreamPythonFunctionInfo``.
        tag: The marker tag.
        typed: Whether the fused operator's input is typed (its first function unwraps).
    """
    from pyflink.datastream.data_stream import _create_j_data_stream_python_function_info
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    info_class = jvm.org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo
    previous = None
    # The first to run is the last found: the one reading the fused operator's input.
    for transformation in reversed(upstream.transformations):
        info = transformation.getOperatorFactory().getOperator().getPythonFunctionInfo()
        payload = bytes(info.getPythonFunction().getSerializedPythonFunction())
        wrapped = MarkerPassingFunction(payload, tag, typed and previous is None)
        j_info = _create_j_data_stream_python_function_info(wrapped, info.getFunctionType())
        if previous is not None:
            j_info = info_class(j_info.getPythonFunction(), previous, j_info.getFunctionType())
        previous = j_info
    return info_class(writer_info.getPythonFunction(), previous, writer_info.getFunctionType())


def take_over(j_env: Any, upstream: Upstream, j_fused: Any) -> None:
    """Give the fused transformation the first upstream's settings and drop the upstreams.

    Dropped from the environment's transformations (as PyFlink's optimizer drops what it fused),
    they are no longer run on their own: nothing else reads them (:func:`fusable_upstream`).
    """
    from pyflink.util.java_utils import get_field_value

    first = upstream.first
    j_fused.setParallelism(first.getParallelism())
    if first.getMaxParallelism() > 0:
        j_fused.setMaxParallelism(first.getMaxParallelism())
    if first.getSlotSharingGroup().isPresent():
        j_fused.setSlotSharingGroup(first.getSlotSharingGroup().get())
    if first.getUid() is not None:
        j_fused.setUid(first.getUid())
    transformations = get_field_value(j_env, "transformations")
    for transformation in upstream.transformations:
        transformations.remove(transformation)


def _fusable(j_transformation: Any, upstream: Upstream, consumers: dict[int, int]) -> bool:
    operator = _operator(j_transformation)
    if operator is None or operator.getClass().getName() not in FUSABLE_OPERATORS:
        return False
    info = operator.getPythonFunctionInfo()
    if len(info.getInputs()) != 0 or not operator.getSideOutputTags().isEmpty():
        return False
    # The writer's input itself feeds the writer only; the earlier ones feed one operator each.
    if consumers.get(j_transformation.getId(), 0) > (0 if not upstream.transformations else 1):
        return False
    if upstream.transformations:
        first = upstream.first
        if (
            j_transformation.getParallelism() != first.getParallelism()
            or j_transformation.getMaxParallelism() != first.getMaxParallelism()
            or not j_transformation.getSlotSharingGroup().equals(first.getSlotSharingGroup())
        ):
            return False
    return True


def _consumers(j_env: Any) -> dict[int, int]:
    """How many transformations of the job read each transformation, by id.

    Every operator of the job is in the environment's list; what they read (partitionings and
    side outputs too, which are not in the list) is found through their inputs.
    """
    from pyflink.util.java_utils import get_field_value

    pending = list(get_field_value(j_env, "transformations").toArray())
    seen: set[int] = set()
    counts: dict[int, int] = {}
    while pending:
        transformation = pending.pop()
        if transformation.getId() in seen:
            continue
        seen.add(transformation.getId())
        for source in transformation.getInputs().toArray():
            counts[source.getId()] = counts.get(source.getId(), 0) + 1
            pending.append(source)
    return counts
