"""The writer fused with the plain Python functions before it, when the job is executed.

PyFlink fuses consecutive Python operators itself, when the job is executed
(``PythonOperatorChainingOptimizer``): the fused operator is a copy of the *first* operator of
the chain, running the later functions after it. A writer fused that way would lose the bridge's
marker operator (its markers, its flush thresholds, its error classification), and a marker
cannot simply go into a fused operator's input either: the first function of the chain (the
user's map) would receive it.

So this module fuses first, at the same point: :func:`install` wraps PyFlink's
``StreamExecutionEnvironment._generate_stream_graph`` (what ``execute``, ``execute_async`` and
``get_execution_plan`` build the job from) and runs :func:`fuse_writers` before PyFlink's own
Python chaining. Then the job is complete, so a stream read by anything else (an operator or
sink added after ``sink_to``, a side output) is seen, and no function ever runs twice. The
Python functions right before a registered writer (plain, not keyed, process-mode or
thread-mode ``map``, ``flat_map``, ``filter`` or ``process`` with no side outputs, each read by
exactly one operator, on a direct edge, with the writer's parallelism, maximum parallelism and
slot sharing group, chaining not disabled) are taken out of the job and run inside the writer's
own marker operator, each wrapped in a :class:`MarkerPassingFunction` that hands markers on to
the next function untouched. The writer's transformation is rewired in place (the bridge's
``WriterFusion``), so what reads it (the discarding sink, a committer) is unchanged. Records
cross from the JVM to Python once, and the writer still waits only at markers and keeps its own
flush thresholds; the operator's bundles are no longer than the job's
(:func:`bundle_configuration`), so a slow function holds a checkpoint no longer than it did on
its own.

Where nothing can be fused, the writer keeps the shape ``sink_to`` gave it: a chain of its own
after a Python operator (so PyFlink does not fuse it into that operator), the chain of the Java
operators before it otherwise. A second pass over the same environment (``get_execution_plan()``
then ``execute()``) first undoes its fusion, so a reader added in between is seen too.
``execute_and_collect()`` does not go through this method and keeps the unfused shape.
"""

from __future__ import annotations

import functools
import inspect
import logging
import pickle
from dataclasses import dataclass, field
from typing import Any

from pyflink.datastream.functions import ProcessFunction, RuntimeContext

from pyflink_gcp.core.operators import bare_marker_id
from pyflink_gcp.core.sink_writer import SinkConfig

_LOG = logging.getLogger("pyflink_gcp.fusion")

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
_WRITER_FUSION = "dev.pyflinkgcp.bridge.WriterFusion"
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
        typed: Whether this function heads the operator on a typed input: a marker then comes
            as an element without a value (:func:`~pyflink_gcp.core.operators.bare_marker_id`)
            and leaves as the pickled-style tuple the functions after it expect.
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
            marker = bare_marker_id(value, ctx)
            if marker is not None:
                return ((self._tag, marker),)
            return self._function.process_element(value, ctx)
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
        """The transformation that fed the writer."""
        return self.transformations[0]

    @property
    def head(self) -> Any:
        """The transformation that runs first: its uid and chaining carry over, as in PyFlink."""
        return self.transformations[-1]


@dataclass
class Candidate:
    """A writer the pass may fuse: a non-keyed marker writer that did not opt out.

    Attributes:
        config: The sink's configuration (the fused writer function is built from it).
        name: The writer operator's own name.
        uid: The writer operator's own uid, or None.
        j_writer: The writer's Java transformation, as ``sink_to`` built it.
        j_conf: A copy of the writer operator's configuration taken at ``sink_to``, before
            PyFlink merges the job's Python options into it: its bundle size and time are the
            writer's flush thresholds.
        fused: What the writer took in, while it is fused.
        factory: The writer's own operator factory, while it is fused.
    """

    config: SinkConfig
    name: str
    uid: str | None
    j_writer: Any
    j_conf: Any
    fused: Upstream | None = None
    factory: Any = None


#: The registered writers, by their transformation's id (unique in the JVM).
_CANDIDATES: dict[int, Candidate] = {}
#: Whether :func:`install` wrapped PyFlink's graph generation (None: not tried yet).
_INSTALLED: bool | None = None
#: The parameters of the PyFlink method the pass wraps, as in PyFlink 2.3.
_SIGNATURE = ["self", "clear_transformations", "job_name"]


def register(j_writer: Any, config: SinkConfig, name: str, uid: str | None, j_conf: Any) -> bool:
    """Let the pass fuse this writer when the job is executed; False if it cannot run.

    Args:
        j_writer: The writer's Java transformation (the marker operator, unfused).
        config: The sink's configuration.
        name: The writer operator's name.
        uid: The writer operator's uid, or None.
        j_conf: The writer operator's configuration.
    """
    if not install():
        return False
    from pyflink.java_gateway import get_gateway

    snapshot = get_gateway().jvm.org.apache.flink.configuration.Configuration(j_conf)
    _CANDIDATES[j_writer.getId()] = Candidate(config, name, uid, j_writer, snapshot)
    return True


def install() -> bool:
    """Wrap PyFlink's ``_generate_stream_graph`` once so :func:`fuse_writers` runs first.

    The wrap is on the class, so every environment of the process gets it; the pass does
    nothing for an environment without registered writers. If the method is not the one this
    was written against (another PyFlink version), nothing is installed, a warning says so,
    and writers keep the shape ``sink_to`` gave them (a chain of their own).
    """
    global _INSTALLED
    if _INSTALLED is not None:
        return _INSTALLED
    from pyflink.datastream import StreamExecutionEnvironment

    original = getattr(StreamExecutionEnvironment, "_generate_stream_graph", None)
    if getattr(original, "_pyflink_gcp_fusion", False):
        _INSTALLED = True
        return True
    try:
        parameters = list(inspect.signature(original).parameters) if original else None
    except (TypeError, ValueError):
        parameters = None
    if parameters != _SIGNATURE:
        _LOG.warning(
            "this PyFlink's StreamExecutionEnvironment._generate_stream_graph is not the one "
            "pyflink-gcp fuses writers in (parameters %s, expected %s): every writer runs in a "
            "chain of its own, one more JVM-to-Python crossing per record",
            parameters,
            _SIGNATURE,
        )
        _INSTALLED = False
        return False

    @functools.wraps(original)  # type: ignore[arg-type]
    def _generate_stream_graph(
        self: Any, clear_transformations: bool = False, job_name: str | None = None
    ) -> Any:
        done = fuse_writers(self._j_stream_execution_environment)
        graph = original(self, clear_transformations, job_name)  # type: ignore[misc]
        if clear_transformations:  # the environment forgets its operators: so does the pass
            for writer_id in done:
                _CANDIDATES.pop(writer_id, None)
        return graph

    _generate_stream_graph._pyflink_gcp_fusion = True  # type: ignore[attr-defined]
    StreamExecutionEnvironment._generate_stream_graph = _generate_stream_graph  # type: ignore[method-assign]
    _INSTALLED = True
    return True


def fuse_writers(j_env: Any) -> list[int]:
    """Fuse every registered writer of this environment that can be; return their ids.

    A writer fused by an earlier pass over the same environment is restored first, so the
    result depends only on the job as it is now (a reader added since is seen). Every
    writer's chaining strategy is set last (:func:`_set_chaining`). Nothing is fused when the
    job turns PyFlink's Python operator chaining off.
    """
    from pyflink.util.java_utils import get_field_value

    present = {t.getId() for t in get_field_value(j_env, "transformations").toArray()}
    candidates = [c for writer_id, c in _CANDIDATES.items() if writer_id in present]
    for candidate in candidates:
        if candidate.fused is not None:
            _restore(j_env, candidate)
    chaining = _chaining_enabled(j_env)
    for candidate in candidates:
        if chaining:
            upstream = fusable_upstream(j_env, candidate.j_writer)
            if upstream is not None:
                _fuse(j_env, candidate, upstream)
        _set_chaining(candidate)
    return [c.j_writer.getId() for c in candidates]


def fusable_upstream(j_env: Any, j_writer: Any) -> Upstream | None:
    """The Python functions the writer ``j_writer`` can take in, or None.

    Walks up from the writer's input while each transformation is a fusable Python operator
    (:data:`FUSABLE_OPERATORS`, a function of its own with no side outputs) that only the
    operator after it reads, with the writer's parallelism, maximum parallelism and slot
    sharing group, and a chaining strategy that lets it chain (PyFlink's own rules).
    """
    consumers = _consumers(j_env)
    upstream = Upstream()
    current = j_writer.getInputs().get(0)
    while _fusable(current, j_writer, upstream, consumers):
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
        typed: Whether the fused operator's input is typed (its first function tells markers,
            elements without a value, from records).
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


def _fuse(j_env: Any, candidate: Candidate, upstream: Upstream) -> None:
    """Rewire the writer to run ``upstream``'s functions in a new marker operator."""
    from pyflink.common.typeinfo import Types
    from pyflink.datastream.data_stream import _create_j_data_stream_python_function_info
    from pyflink.fn_execution import flink_fn_execution_pb2
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import get_field_value

    from pyflink_gcp.core.bridge import MARKER_OPERATOR, java_class
    from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER
    from pyflink_gcp.core.operators import MARKER_TAG, writer_function

    jvm = get_gateway().jvm
    j_writer = candidate.j_writer
    j_input_type = upstream.input.getOutputType()
    # Typed input: records come as they are, markers as elements without a value.
    typed = not j_input_type.equals(Types.PICKLED_BYTE_ARRAY().get_java_type_info())
    # The functions before it hand the writer Python objects and markers as (tag, id) tuples,
    # whatever the operator's input type: the untyped marker function, with results if asked.
    writer_info = _create_j_data_stream_python_function_info(
        writer_function(candidate.config, marked=True, typed=False),
        flink_fn_execution_pb2.UserDefinedDataStreamFunction.PROCESS,
    )
    operator = java_class(MARKER_OPERATOR)(
        bundle_configuration(candidate.j_conf, j_env),
        chain_info(upstream, writer_info, MARKER_TAG, typed),
        j_input_type,
        j_writer.getOutputType(),
        MARKER_TAG,
        typed,
        NON_RETRIABLE_MARKER,
    )
    factory = jvm.org.apache.flink.streaming.api.operators.SimpleOperatorFactory.of(operator)
    candidate.factory = j_writer.getOperatorFactory()
    java_class(_WRITER_FUSION).rewire(j_writer, upstream.input, factory)
    j_writer.setName(f"{upstream.names()}, {candidate.name}")
    # As PyFlink's fusion: the fused operator keeps the first function's uid when it has one.
    if upstream.head.getUid() is not None:
        j_writer.setUid(upstream.head.getUid())
    transformations = get_field_value(j_env, "transformations")
    for transformation in upstream.transformations:
        transformations.remove(transformation)
    candidate.fused = upstream


def bundle_configuration(j_writer_conf: Any, j_env: Any) -> Any:
    """The fused operator's configuration: the writer's, with bundles no longer than the job's.

    A bundle end waits until Python has processed every record sent to it, and so does a
    checkpoint barrier. On its own, a function ran in bundles of the job's
    ``python.fn-execution.bundle.size`` and ``bundle.time`` (1,000 records, 1 s by default);
    taken into the writer, it must not run in the writer's much larger ones
    (``max_buffered_records``), or a slow function would hold every checkpoint for that many
    records. The writer's batching does not follow bundle ends under markers (an ordinary
    bundle end only sends the batches that are due), so the smaller bundles cost it nothing but
    the bundle ends themselves.
    """
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    options = jvm.org.apache.flink.python.PythonOptions
    conf = jvm.org.apache.flink.configuration.Configuration(j_writer_conf)
    job = j_env.getConfiguration()
    for option in (options.MAX_BUNDLE_SIZE, options.MAX_BUNDLE_TIME_MILLS):
        bound = min(int(conf.get(option)), int(job.get(option)))
        conf.setString(option.key(), str(bound))
    return conf


def _restore(j_env: Any, candidate: Candidate) -> None:
    """Undo :func:`_fuse`: the functions back in the job, before the writer's own operator.

    The first function reads what the writer reads now (PyFlink's chaining may have replaced
    the transformation it read by a fused one).
    """
    from pyflink.util.java_utils import get_field_value

    from pyflink_gcp.core.bridge import java_class

    upstream = candidate.fused
    assert upstream is not None
    fusion = java_class(_WRITER_FUSION)
    j_writer = candidate.j_writer
    fusion.setInput(upstream.head, j_writer.getInputs().get(0))
    fusion.rewire(j_writer, upstream.first, candidate.factory)
    j_writer.setName(candidate.name)
    j_writer.setUid(candidate.uid)
    transformations = get_field_value(j_env, "transformations")
    index = transformations.indexOf(j_writer)
    if index < 0:
        index = transformations.size()
    for offset, transformation in enumerate(reversed(upstream.transformations)):
        transformations.add(index + offset, transformation)
    candidate.fused = None
    candidate.factory = None


def _set_chaining(candidate: Candidate) -> None:
    """A chain of the writer's own after a Python operator, else the chain before it.

    PyFlink's chaining would fuse a writer that may chain into the Python operator before it,
    as a copy of that operator (no markers, the upstream's bundle settings); it never fuses a
    writer that heads its chain, nor one after a Java operator. A fused writer whose first
    function was asked to start a new chain starts one.
    """
    from pyflink.java_gateway import get_gateway

    strategies = get_gateway().jvm.org.apache.flink.streaming.api.operators.ChainingStrategy
    j_writer = candidate.j_writer
    own_chain = is_python_operator(j_writer.getInputs().get(0)) or (
        candidate.fused is not None and _strategy(candidate.fused.head) != "ALWAYS"
    )
    j_writer.setChainingStrategy(strategies.HEAD if own_chain else strategies.ALWAYS)


def _chaining_enabled(j_env: Any) -> bool:
    """Whether the job lets PyFlink chain Python operators (``python.operator-chaining.enabled``)."""
    from pyflink.java_gateway import get_gateway

    option = (
        get_gateway().jvm.org.apache.flink.python.PythonOptions.PYTHON_OPERATOR_CHAINING_ENABLED
    )
    return bool(j_env.getConfiguration().get(option))


def _strategy(j_transformation: Any) -> str:
    return str(j_transformation.getOperatorFactory().getChainingStrategy().name())


def _fusable(
    j_transformation: Any, j_writer: Any, upstream: Upstream, consumers: dict[int, int]
) -> bool:
    operator = _operator(j_transformation)
    if operator is None or operator.getClass().getName() not in FUSABLE_OPERATORS:
        return False
    info = operator.getPythonFunctionInfo()
    if len(info.getInputs()) != 0 or not operator.getSideOutputTags().isEmpty():
        return False
    if consumers.get(j_transformation.getId(), 0) != 1:
        return False
    if (
        j_transformation.getParallelism() != j_writer.getParallelism()
        or j_transformation.getMaxParallelism() != j_writer.getMaxParallelism()
        or not j_transformation.getSlotSharingGroup().equals(j_writer.getSlotSharingGroup())
    ):
        return False
    if _strategy(j_transformation) == "NEVER":
        return False
    # The one taken in before this one no longer heads the chain: it must chain to this one.
    return not upstream.transformations or _strategy(upstream.head) == "ALWAYS"


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
