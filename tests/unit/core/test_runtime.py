"""The job graph the runtime builds for a writer, read from the execution plan; no job runs.

In the style of PyFlink's own connector tests: build a small pipeline ending in ``sink_to``,
read ``env.get_execution_plan()`` (JSON), and look at the writer's node. What the JSON does not
say (the Java operator's class, the Python function it runs, its key selector, the chains) is
read from the stream graph the plan is made of and from its job graph, matched by node name.
Building the graph starts PyFlink's JVM but no cluster and no Python worker.
"""

from __future__ import annotations

import json
import logging
import pickle
from dataclasses import dataclass
from typing import Any

import pytest
from pyflink.common.typeinfo import Types
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.fn_execution import flink_fn_execution_pb2

from pyflink_gcp.core import ConfigurationError, bridge, fusion, operators, runtime
from pyflink_gcp.core.carry import CarrySettings
from pyflink_gcp.core.commit_operator import CommitterProcessFunction
from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER
from tests.support.fakes import FileDestination, FileSink
from tests.support.jobs import make_env, record_stream

WRITER = "file-sink: Writer"
PROCESS = "org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator"
KEYED_PROCESS = (
    "org.apache.flink.streaming.api.operators.python.process.ExternalPythonKeyedProcessOperator"
)
FUNCTION_TYPES = flink_fn_execution_pb2.UserDefinedDataStreamFunction


@pytest.fixture(scope="module", autouse=True)
def _jvm_after_the_stack(request: pytest.FixtureRequest) -> None:
    """Starts the emulator stack first when this session also runs jobs against it.

    PyFlink's Python workers inherit the environment of the JVM this module starts (the first in
    the process), so the stack's variables must be in it before, as an e2e test's stack would
    be; alone, these tests need no emulator.
    """
    from pyflink import java_gateway

    if java_gateway._gateway is None and any(
        item.get_closest_marker("e2e") for item in request.session.items
    ):
        request.getfixturevalue("stack")


@dataclass(frozen=True)
class WriterNode:
    """What the job graph says about the writer operator."""

    plan_name: str  # the plan node holding the writer (several names when PyFlink fused it)
    input_shipping: str  # how records reach it: FORWARD, or HASH on a keyed stream
    operator_class: str
    function: Any  # the Python function the operator runs, unpickled
    function_type: int
    state_keyed: bool  # the operator has a key selector (keyed state, one key on one subtask)
    chain: str  # the name of the job vertex (operator chain) holding the writer
    typed_markers: bool | None  # the marker operator's wrapping of typed records
    ships_bridge_jar: bool
    upstream_functions: list[Any]  # fused: the functions before the writer's, first first
    upstream_only_in_writer: bool  # fused: no other node of the graph runs a map


def writer_node(env: StreamExecutionEnvironment) -> WriterNode:
    from pyflink.util.java_utils import get_field_value, get_j_env_configuration

    plan = json.loads(env.get_execution_plan())
    [node] = [n for n in plan["nodes"] if WRITER in n["type"].split(", ")]
    [shipping] = [p["ship_strategy"] for p in node["predecessors"]]
    graph = env._generate_stream_graph(False)
    [stream_node] = [
        n for n in graph.getStreamNodes().toArray() if n.getOperatorName() == node["type"]
    ]
    operator = stream_node.getOperator()
    info = operator.getPythonFunctionInfo()  # fused: the writer's, with the upstream as input
    function = pickle.loads(bytes(info.getPythonFunction().getSerializedPythonFunction()))
    vertices = [v.getName() for v in graph.getJobGraph().getVerticesAsArray()]
    [chain] = [v for v in vertices if node["type"] in v.split(" -> ")]
    operator_class = operator.getClass().getName()
    typed_markers = None
    if operator_class.startswith("dev.pyflinkgcp."):
        typed_markers = get_field_value(operator, "markers").typed()
    jars = get_j_env_configuration(env._j_stream_execution_environment).getString(
        "pipeline.jars", ""
    )
    upstream = []
    inputs = info.getInputs()
    while len(inputs):
        [info_before] = inputs
        payload = bytes(info_before.getPythonFunction().getSerializedPythonFunction())
        upstream.insert(0, pickle.loads(payload))
        inputs = info_before.getInputs()
    names = [n.getOperatorName() for n in graph.getStreamNodes().toArray()]
    return WriterNode(
        plan_name=node["type"],
        input_shipping=shipping,
        operator_class=operator_class,
        function=function,
        function_type=info.getFunctionType(),
        state_keyed=len(stream_node.getStatePartitioners()) > 0,
        chain=chain,
        typed_markers=typed_markers,
        ships_bridge_jar=bridge.JAR.as_uri() in jars,
        upstream_functions=upstream,
        upstream_only_in_writer=not [n for n in names if n != node["type"] and "Map" in n],
    )


def sink_of(**options: Any) -> FileSink:
    return FileSink("/nonexistent", lambda record, ctx: FileDestination.of("x"), **options)


def pipeline(*, keyed: bool, typed: bool) -> tuple[StreamExecutionEnvironment, DataStream]:
    """Records, as pickled Python objects or as strings, keyed or not."""
    env = make_env(parallelism=2, checkpoint_ms=1000)
    ds = record_stream(env, 10, lambda i: {"i": i})
    if typed:
        ds = ds.map(json.dumps, output_type=Types.STRING())
        if keyed:
            ds = ds.key_by(lambda s: s[:8], key_type=Types.STRING())
    elif keyed:
        ds = ds.key_by(lambda r: r["i"] % 3)
    return env, ds


@pytest.fixture(scope="module")
def jar() -> None:
    if bridge.bridge_jar() is None:
        pytest.skip("no bridge jar and no JDK to build one")


MODES = {
    # mode: (sink options, the bridge jar present, markers expected). By default a marker writer
    # takes the maps before it into its operator when the plan is made (a keyed stream's writer
    # has nothing to fuse with: its partitioning keeps it out of its upstream's chain).
    "markers": ({}, True, True),
    "markers off": ({"checkpoint_markers": False}, True, False),
    "own chain": ({"chain_with_upstream": False}, True, True),
    "own chain, markers off": (
        {"chain_with_upstream": False, "checkpoint_markers": False},
        True,
        False,
    ),
    "no bridge jar": ({}, False, False),
}


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("typed", [False, True], ids=["pickled", "typed"])
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_the_writer_operator_in_the_job_graph(monkeypatch, keyed, typed, mode):
    options, jar_present, marked = MODES[mode]
    if not jar_present:
        monkeypatch.setattr(runtime, "bridge_jar", lambda: None)
    env, ds = pipeline(keyed=keyed, typed=typed)
    ds.sink_to(sink_of(**options))

    node = writer_node(env)

    fused = marked and options.get("chain_with_upstream", True) and not keyed
    assert (node.plan_name != WRITER) is fused, node.plan_name
    if fused:
        # The maps' names first, in the source's chain.
        maps = "Map, Map" if typed else "Map"
        assert node.plan_name == f"{maps}, {WRITER}", node.plan_name
        assert node.chain == f"Source: records -> {maps}, {WRITER} -> Sink: Writer", node.chain
    else:
        # The writer heads its chain; only the discarding Java sink follows it.
        assert node.chain == f"{WRITER} -> Sink: Writer", node.chain

    assert node.input_shipping == ("HASH" if keyed else "FORWARD")
    assert node.state_keyed is keyed
    assert node.function_type == (FUNCTION_TYPES.KEYED_PROCESS if keyed else FUNCTION_TYPES.PROCESS)

    if marked:
        assert node.operator_class == (
            bridge.KEYED_MARKER_OPERATOR if keyed else bridge.MARKER_OPERATOR
        )
        if fused:
            # The operator reads the source's numbers (typed); the first map tells markers from
            # them, and the writer gets the maps' Python objects with the markers among them.
            assert node.typed_markers is True
            expected_function: type = operators.MarkedWriterProcessFunction
            assert [type(f) for f in node.upstream_functions] == [fusion.MarkerPassingFunction] * (
                2 if typed else 1
            )
            assert [f._typed for f in node.upstream_functions] == [True] + [False] * typed
            assert node.upstream_only_in_writer
        else:
            assert node.typed_markers is typed
            expected_function = (
                operators.TypedMarkedWriterProcessFunction
                if typed
                else operators.MarkedWriterProcessFunction
            )
    else:
        # PyFlink's own operator, never fused with the maps before it.
        assert node.operator_class == (KEYED_PROCESS if keyed else PROCESS)
        expected_function = operators.WriterProcessFunction
    assert type(node.function) is expected_function
    assert node.ships_bridge_jar is marked


def test_a_job_without_python_metrics_is_refused_at_sink_to():
    env = make_env(parallelism=1, extra={"python.metric.enabled": "false"})
    ds = record_stream(env, 10, lambda i: {"i": i})
    with pytest.raises(ConfigurationError, match="python.metric.enabled"):
        ds.sink_to(sink_of())


WARNED = {
    # mode: (sink options, the bridge jar present, the reason the warning names)
    "no bridge jar": ({}, False, "the Java bridge jar is unavailable"),
    "markers off": ({"checkpoint_markers": False}, True, "set_checkpoint_markers(False)"),
}


def warned_pipeline(mode: str) -> tuple[StreamExecutionEnvironment, DataStream]:
    return pipeline(keyed=False, typed=False)


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("mode", WARNED)
def test_a_writer_on_pyflinks_own_operator_warns_that_restarts_go_on(monkeypatch, caplog, mode):
    """Only the bridge's operator can end a job on a non-retriable error; say so otherwise."""
    options, jar_present, reason = WARNED[mode]
    if not jar_present:
        monkeypatch.setattr(runtime, "bridge_jar", lambda: None)
    env, ds = warned_pipeline(mode)
    with caplog.at_level("WARNING", logger="pyflink_gcp.runtime"):
        ds.sink_to(sink_of(**options))
    [warning] = [r.getMessage() for r in caplog.records if r.name == "pyflink_gcp.runtime"]
    assert "sink 'file-sink'" in warning and reason in warning, warning
    assert "cannot stop Flink's restart strategy" in warning, warning


@pytest.mark.usefixtures("jar")
def test_the_marker_operator_is_told_the_non_retriable_mark(caplog):
    env, ds = pipeline(keyed=False, typed=False)
    with caplog.at_level("WARNING", logger="pyflink_gcp.runtime"):
        ds.sink_to(sink_of())
    assert not [r for r in caplog.records if r.name == "pyflink_gcp.runtime"]
    from pyflink.util.java_utils import get_field_value

    graph = env._generate_stream_graph(False)
    [node] = [
        n
        for n in graph.getStreamNodes().toArray()
        if WRITER in n.getOperatorName().split(", ")  # fused: "Map, file-sink: Writer"
    ]
    errors = get_field_value(node.getOperator(), "errors")
    assert get_field_value(errors, "marker") == NON_RETRIABLE_MARKER


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("mode", WARNED)
@pytest.mark.parametrize(
    ("needs", "message"),
    [
        ({"requires_bridge": "WriteMethod.X"}, r"WriteMethod\.X needs"),
        ({"carry": CarrySettings(60.0)}, r"max_carry_time \(the carried records"),
    ],
    ids=["exactly-once method", "carried records"],
)
def test_a_sink_that_needs_the_bridge_is_refused_at_sink_to_without_it(
    monkeypatch, mode, needs, message
):
    """The hook for exactly-once methods and carried records: refused on the client, before
    any record or restart."""
    options, jar_present, _ = WARNED[mode]
    if not jar_present:
        monkeypatch.setattr(runtime, "bridge_jar", lambda: None)
    env, ds = warned_pipeline(mode)
    with pytest.raises(ConfigurationError, match=rf"sink 'file-sink': {message}"):
        ds.sink_to(sink_of(**needs, **options))


@pytest.mark.usefixtures("jar")
def test_a_carrying_sink_is_refused_on_a_keyed_stream_and_with_an_exactly_once_write():
    from tests.support.committing import StagingSink

    env, ds = pipeline(keyed=True, typed=False)
    with pytest.raises(ConfigurationError, match="max_carry_time is not available on a keyed"):
        ds.sink_to(sink_of(carry=CarrySettings(60.0)))
    sink = StagingSink("/nonexistent")
    sink._config.carry = CarrySettings(60.0)
    env, ds = pipeline(keyed=False, typed=False)
    with pytest.raises(ConfigurationError, match="with StagingFactory: an exactly-once"):
        ds.sink_to(sink)


@pytest.mark.usefixtures("jar")
def test_a_carrying_sink_runs_as_the_marker_operator():
    env, ds = pipeline(keyed=False, typed=True)
    ds.sink_to(sink_of(carry=CarrySettings(60.0)))
    assert writer_node(env).operator_class == bridge.MARKER_OPERATOR


@pytest.mark.usefixtures("jar")
def test_a_sink_that_needs_the_bridge_runs_with_it():
    env, ds = pipeline(keyed=True, typed=False)
    ds.sink_to(sink_of(requires_bridge="WriteMethod.X"))
    assert writer_node(env).operator_class == bridge.KEYED_MARKER_OPERATOR


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_committing_writer_is_followed_by_the_committer_in_a_chain_of_its_own(keyed):
    from pyflink.util.java_utils import get_field_value

    from tests.support.committing import StagingSink

    env, ds = pipeline(keyed=keyed, typed=False)
    ds.sink_to(StagingSink("/nonexistent"))
    plan = json.loads(env.get_execution_plan())
    [committer] = [n for n in plan["nodes"] if n["type"] == "staging-sink: Committer"]
    [writer] = [n for n in plan["nodes"] if n["type"].endswith("staging-sink: Writer")]
    assert [(p["id"], p["ship_strategy"]) for p in committer["predecessors"]] == [
        (writer["id"], "FORWARD")
    ]
    graph = env._generate_stream_graph(False)
    vertices = [v.getName() for v in graph.getJobGraph().getVerticesAsArray()]
    assert "staging-sink: Committer" in [v.split(" -> ")[0] for v in vertices]
    [node] = [
        n for n in graph.getStreamNodes().toArray() if n.getOperatorName() == committer["type"]
    ]
    operator = node.getOperator()
    assert operator.getClass().getName() == bridge.COMMITTER_OPERATOR
    assert get_field_value(operator, "checkpointing") is True
    function = pickle.loads(
        bytes(operator.getPythonFunctionInfo().getPythonFunction().getSerializedPythonFunction())
    )
    assert isinstance(function, CommitterProcessFunction)


@pytest.mark.parametrize("mode", WARNED)
def test_a_committing_writer_is_refused_at_sink_to_without_the_bridge(monkeypatch, mode):
    from tests.support.committing import StagingSink

    options, jar_present, _ = WARNED[mode]
    if not jar_present:
        monkeypatch.setattr(runtime, "bridge_jar", lambda: None)
    sink = StagingSink("/nonexistent")
    for key, value in options.items():
        setattr(sink._config, key, value)
    env, ds = warned_pipeline(mode)
    with pytest.raises(ConfigurationError, match=r"StagingFactory \(it commits after each"):
        ds.sink_to(sink)


@pytest.mark.usefixtures("jar")
def test_a_committing_writer_fused_with_its_upstream_keeps_markers_and_its_committer():
    from tests.support.committing import StagingSink

    sink = StagingSink("/nonexistent")
    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink)
    plan = json.loads(env.get_execution_plan())
    names = [n["type"] for n in plan["nodes"]]
    assert "Map, staging-sink: Writer" in names and "staging-sink: Committer" in names, names
    graph = env._generate_stream_graph(False)
    [node] = [
        n
        for n in graph.getStreamNodes().toArray()
        if n.getOperatorName() == "Map, staging-sink: Writer"
    ]
    assert node.getOperator().getClass().getName() == bridge.MARKER_OPERATOR


def plan_nodes(env: StreamExecutionEnvironment) -> list[str]:
    """The plan's operator names, sorted."""
    return sorted(n["type"] for n in json.loads(env.get_execution_plan())["nodes"])


def job_vertices(env: StreamExecutionEnvironment) -> list[str]:
    """The job graph's vertex names (operator chains), sorted."""
    graph = env._generate_stream_graph(False)
    return sorted(v.getName() for v in graph.getJobGraph().getVerticesAsArray())


def runs_of_the_map(nodes: list[str]) -> int:
    """How many operators of the plan run the record map, named "mapped" (alone or fused)."""
    return sum(name.split(", ").count("mapped") for name in nodes)


READERS = {
    # reader: what reads the mapped stream besides the writer, added after sink_to
    "map": lambda ds: ds.map(lambda r: r).name("reader"),
    "print sink": lambda ds: ds.print(),
    "second sink": lambda ds: ds.sink_to(sink_of()),
}


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("reader", READERS)
def test_a_stream_read_after_sink_to_is_not_taken_in_so_its_map_runs_once(reader):
    env, ds = pipeline(keyed=False, typed=False)
    ds = ds.name("mapped")
    ds.sink_to(sink_of())
    READERS[reader](ds)

    nodes = plan_nodes(env)
    assert runs_of_the_map(nodes) == 1, nodes
    assert WRITER in nodes and "mapped" in nodes, nodes
    # The writer heads a chain of its own after the map it did not take in.
    assert f"{WRITER} -> Sink: Writer" in job_vertices(env)


@pytest.mark.usefixtures("jar")
def test_a_reader_added_after_the_plan_was_made_undoes_the_fusion():
    env, ds = pipeline(keyed=False, typed=False)
    ds = ds.name("mapped")
    ds.sink_to(sink_of())
    fused = plan_nodes(env)
    assert f"mapped, {WRITER}" in fused, fused
    # The pass is repeatable: the same plan and graph every time.
    assert plan_nodes(env) == fused
    assert job_vertices(env) == job_vertices(env)
    assert f"Source: records -> mapped, {WRITER} -> Sink: Writer" in job_vertices(env)

    ds.map(lambda r: r).name("reader")
    nodes = plan_nodes(env)
    assert runs_of_the_map(nodes) == 1 and WRITER in nodes, nodes
    assert plan_nodes(env) == nodes


CHANGES = {
    # change made to the map after sink_to: the writer cannot take it in
    "parallelism": lambda ds: ds.set_parallelism(3),
    "max parallelism": lambda ds: ds.set_max_parallelism(64),
    "slot sharing group": lambda ds: ds.slot_sharing_group("other"),
    "chaining disabled": lambda ds: ds.disable_chaining(),
}


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize("change", CHANGES)
def test_a_map_settings_the_writer_does_not_share_keep_it_out(change):
    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink_of())
    CHANGES[change](ds)
    nodes = plan_nodes(env)
    assert WRITER in nodes and "Map" in nodes, nodes


@pytest.mark.usefixtures("jar")
def test_nothing_is_fused_when_the_job_turns_python_chaining_off():
    env = make_env(parallelism=2, extra={"python.operator-chaining.enabled": "false"})
    ds = record_stream(env, 10, lambda i: {"i": i})
    ds.sink_to(sink_of())
    nodes = plan_nodes(env)
    assert WRITER in nodes and "Map" in nodes, nodes


@pytest.mark.usefixtures("jar")
def test_a_writer_behind_a_repartitioning_is_not_fused():
    env, ds = pipeline(keyed=False, typed=False)
    ds.rebalance().sink_to(sink_of())
    nodes = plan_nodes(env)
    assert WRITER in nodes and "Map" in nodes, nodes


@pytest.mark.usefixtures("jar")
def test_the_fused_writer_keeps_the_first_functions_uid_or_its_own():
    env, ds = pipeline(keyed=False, typed=False)
    ds.uid("the-map")
    ds.sink_to(sink_of(uid="files"))
    graph = env._generate_stream_graph(False)
    [node] = [n for n in graph.getStreamNodes().toArray() if WRITER in n.getOperatorName()]
    assert node.getOperatorName() == f"Map, {WRITER}"
    assert node.getTransformationUID() == "the-map"

    env, ds = pipeline(keyed=False, typed=False)
    ds.sink_to(sink_of(uid="files"))
    graph = env._generate_stream_graph(False)
    [node] = [n for n in graph.getStreamNodes().toArray() if WRITER in n.getOperatorName()]
    assert node.getTransformationUID() == "files-writer"


@pytest.mark.parametrize(
    ("target", "chosen"), [(None, True), ("local", True), ("remote", False)], ids=str
)
def test_a_job_without_python_executable_gets_the_drivers_interpreter_when_local(
    monkeypatch, caplog, target, chosen
):
    import shutil
    import sys

    from pyflink.java_gateway import get_gateway

    from tests.support.committing import StagingSink

    conf = get_gateway().jvm.org.apache.flink.configuration.Configuration()
    if target is not None:
        conf.setString("execution.target", target)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/python-without-pyflink")
    monkeypatch.setattr(sys, "prefix", "/venv")  # a virtualenv, not activated
    with caplog.at_level(logging.INFO, logger="pyflink_gcp.runtime"):
        runtime._warn_python_executable(conf, StagingSink("/nonexistent")._config)
    got = conf.toMap().get("python.executable")
    if chosen:
        assert got == sys.executable and "driver's interpreter" in caplog.text
    else:
        assert got is None and "python.executable is not set" in caplog.text


def test_a_python_executable_set_by_the_user_is_kept(monkeypatch):
    import shutil

    from pyflink.java_gateway import get_gateway

    from tests.support.committing import StagingSink

    conf = get_gateway().jvm.org.apache.flink.configuration.Configuration()
    conf.setString("python.executable", "/opt/py/bin/python")
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/python")
    runtime._warn_python_executable(conf, StagingSink("/nonexistent")._config)
    assert conf.toMap().get("python.executable") == "/opt/py/bin/python"


@pytest.mark.usefixtures("jar")
@pytest.mark.parametrize(
    ("extra", "warned"),
    [({}, True), ({"execution.checkpointing.dir": "file:///tmp/checkpoints"}, False)],
    ids=["jobmanager memory", "a checkpoint directory"],
)
def test_a_carrying_sink_warns_when_checkpoints_stay_in_the_jobmanagers_memory(
    caplog, extra, warned
):
    env = make_env(parallelism=2, checkpoint_ms=1000, extra=extra)
    ds = record_stream(env, 10, lambda i: {"i": i})
    with caplog.at_level(logging.WARNING, logger="pyflink_gcp.runtime"):
        ds.sink_to(sink_of(carry=CarrySettings(60.0)))
    said = [r.getMessage() for r in caplog.records if "max_carry_time keeps" in r.getMessage()]
    assert bool(said) == warned, said
