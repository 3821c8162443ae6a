"""The job wiring: the sink base ``ds.sink_to(...)`` accepts and the writer operator it adds.

This module runs in the client, when the job graph is built; what runs on the worker is in
:mod:`pyflink_gcp.core.operators`. How the pieces meet (facts pinned to PyFlink 2.3):

- ``DataStream.sink_to(sink)`` applies ``sink.get_transformer()`` when the sink implements
  ``SupportsPreprocessing``, then calls Java ``sinkTo`` with ``sink.get_java_function()``. The
  transformer adds the Python writer operator; the Java sink is a ``DiscardingSink``.
- The writer operator is always the *process-mode* Python operator, built with a copy of the job
  configuration where ``python.execution-mode=process``, so it keeps its pre-barrier hook (the
  flush gauge of :mod:`~pyflink_gcp.core.operators`) inside a thread-mode job too. Bundles end
  every ``max_buffered_records`` records and ``max_buffer_time_ms``; those are set on the
  operator's own configuration copy, so they are the writer's size/time flush thresholds and do
  not affect other operators.
- The writer starts a chain of its own so that PyFlink does not fuse it into a preceding Python
  operator (whose bundle settings would win, and whose operator has no markers). When the job
  is executed, a non-keyed marker writer takes the plain Python functions before it into its
  own operator (:mod:`pyflink_gcp.core.fusion`, one JVM round trip less per record), markers
  and thresholds kept, where it can; ``set_chain_with_upstream(False)`` keeps it in a chain of
  its own.
- On a ``KeyedStream`` the operator is the keyed process operator on the keyed partitioning, so
  one key stays on one subtask (and in order).
- **Checkpoint markers.** Where it can, the writer runs as the Java bridge's
  ``CheckpointMarkerProcessOperator`` (:mod:`pyflink_gcp.core.bridge`), whose jar is then
  shipped with the job; the writer function then waits for its writes only at checkpoints and
  the end of input. On a keyed stream the marker carries the subtask's last key; on a typed
  stream the operator is told so, and sends a marker as an element without a value. With
  ``set_checkpoint_markers(False)`` or without the bridge jar, every bundle end waits.
- **Errors a restart cannot fix.** Only the bridge's operator turns a marked
  :class:`~pyflink_gcp.core.errors.NonRetriableSinkError` into Flink's
  ``SuppressRestartsException``. PyFlink's own operator (no bridge jar,
  ``set_checkpoint_markers(False)``) cannot: the job then restarts on
  these errors as on any other, and a warning says so when the job is built. A sink that cannot
  run without the bridge (a write method that commits after the checkpoint) is refused then.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pyflink.common import Configuration
from pyflink.datastream import DataStream, KeyedStream
from pyflink.datastream.connectors.base import Sink, StreamTransformer, SupportsPreprocessing

from pyflink_gcp.core import fusion
from pyflink_gcp.core.bridge import (
    KEYED_MARKER_OPERATOR,
    MARKER_OPERATOR,
    bridge_jar,
)
from pyflink_gcp.core.commit import commits
from pyflink_gcp.core.commit_operator import add_committer_operator, writer_uid
from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER, ConfigurationError
from pyflink_gcp.core.lineage import lineage_end_sink
from pyflink_gcp.core.operators import MARKER_TAG, writer_function
from pyflink_gcp.core.sink_writer import SinkConfig

if TYPE_CHECKING:
    from pyflink_gcp.core.result_stream import WriteResultStream

__all__ = ["DynamicSink", "add_writer_operator"]

_LOG = logging.getLogger("pyflink_gcp.runtime")


def add_writer_operator(ds: DataStream, config: SinkConfig, name: str) -> DataStream:
    """Add the process-mode writer operator for ``config`` after ``ds`` and return its output."""
    from pyflink.common.typeinfo import Types
    from pyflink.datastream.data_stream import _create_j_data_stream_python_function_info
    from pyflink.fn_execution import flink_fn_execution_pb2
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import get_j_env_configuration

    gateway = get_gateway()
    jvm = gateway.jvm
    keyed = isinstance(ds, KeyedStream)
    check_carry(config, "a keyed stream" if keyed else None)
    j_stream = ds._j_data_stream
    j_transformation = j_stream.getTransformation()
    j_env_conf = get_j_env_configuration(j_stream.getExecutionEnvironment())
    _check_python_metrics(j_env_conf, config)
    _warn_python_executable(j_env_conf, config)
    _warn_carry_in_jobmanager_memory(j_env_conf, config)
    j_conf = jvm.org.apache.flink.configuration.Configuration(j_env_conf)
    j_conf.setString("python.execution-mode", "process")
    j_conf.setString("python.fn-execution.bundle.size", str(config.max_buffered_records))
    j_conf.setString("python.fn-execution.bundle.time", str(config.max_buffer_time_ms))

    j_output_type = Types.PICKLED_BYTE_ARRAY().get_java_type_info()
    j_input_type = j_transformation.getOutputType()
    function_types = flink_fn_execution_pb2.UserDefinedDataStreamFunction
    process = jvm.org.apache.flink.streaming.api.operators.python.process
    marker_class, typed = _marker_operator_class(ds, config, j_input_type, j_env_conf)
    marker_args: tuple[Any, ...] = ()
    if marker_class is not None:
        # Typed records (a keyed stream's typed values) go to Python as they are, a marker as
        # an element without a value; pickled ones as they are, a marker as (MARKER_TAG, id).
        operator_class = marker_class
        marker_args = (MARKER_TAG, typed, NON_RETRIABLE_MARKER)
    else:
        _require_no_bridge(config)
        _warn_restarts_not_suppressed(config)
        if keyed:
            operator_class = process.ExternalPythonKeyedProcessOperator
        else:
            operator_class = process.ExternalPythonProcessOperator
    function = writer_function(config, marked=marker_class is not None, typed=typed)
    func_type = function_types.KEYED_PROCESS if keyed else function_types.PROCESS
    j_func_info = _create_j_data_stream_python_function_info(function, func_type)
    j_operator = operator_class(j_conf, j_func_info, j_input_type, j_output_type, *marker_args)
    out = DataStream(j_stream.transform(name, j_output_type, j_operator))
    # A chain of its own: PyFlink would fuse the writer into a preceding Python operator, whose
    # bundles end (and so flush) by the upstream's bundle size and time, silently ignoring the
    # writer's thresholds, and whose operator has no markers. When the job is executed the
    # fusion pass takes the plain functions before a marker writer into its operator where it
    # can, and lets it share the chain of Java operators before it (:mod:`.fusion`).
    out = out.start_new_chain()
    uid = writer_uid(config)
    if uid is not None:
        out._j_data_stream.uid(uid)
    writer_out = out
    if marker_class is not None and config.chain_with_upstream and not keyed:
        fusion.register(out._j_data_stream.getTransformation(), config, name, uid, j_conf)
    if commits(config.factory):
        out = add_committer_operator(out, config, j_conf, name)
    if config.write_results:
        from pyflink_gcp.core.result_stream import results_stream

        return results_stream(config, writer_out, out)
    return out


def _warn_python_executable(j_env_conf: Any, config: SinkConfig) -> None:
    """Make sure the Python workers run an interpreter with pyflink and this package.

    Without ``python.executable`` Flink starts the workers with the ``python`` on the PATH.
    From a virtualenv that is not activated that interpreter lacks pyflink and the sink's client
    libraries, and the job fails far from its cause ("No module named 'pyflink'"). A local job
    (the MiniCluster, ``execution.target`` unset or ``local``) runs its workers on this machine,
    so the interpreter that runs the driver is the right one: it is set as
    ``python.executable`` (and ``python.client.executable``) on the job's configuration, and an
    INFO line says so. On a cluster the workers' interpreter is the cluster's to give: a warning
    names the setting, and a worker that cannot import pyflink ends the job at once with that
    message (the bridge's operators, ``NonRetriableErrors``) instead of restarting it forever.
    Nothing is done when ``python.executable`` is set, or outside a virtualenv when the PATH's
    ``python`` is this interpreter's.
    """
    import shutil
    import sys
    from pathlib import Path

    if str(j_env_conf.toMap().get("python.executable")) not in ("None", ""):
        return
    on_path = shutil.which("python")
    if on_path is not None and Path(on_path).resolve() == Path(sys.executable).resolve():
        return
    target = str(j_env_conf.toMap().get("execution.target"))
    if target in ("None", "", "local"):
        j_env_conf.setString("python.executable", sys.executable)
        if str(j_env_conf.toMap().get("python.client.executable")) in ("None", ""):
            j_env_conf.setString("python.client.executable", sys.executable)
        _LOG.info(
            "%s: python.executable was not set; the local job's Python workers run the "
            "driver's interpreter, %s (the `python` on the PATH is %s)",
            config.sink_name,
            sys.executable,
            on_path,
        )
        return
    if sys.prefix == sys.base_prefix:
        return
    _LOG.warning(
        "%s: python.executable is not set and the `python` on the PATH (%s) is not this "
        "environment's, so the Python workers may fail with \"No module named 'pyflink'\" (the "
        "job then ends with that error). Set python.executable (and python.client.executable) "
        "to the cluster's interpreter with pyflink and pyflink-gcp; see docs/production.md",
        config.sink_name,
        on_path,
    )


def _check_python_metrics(j_env_conf: Any, config: SinkConfig) -> None:
    """Refuse a job without Python metrics when it is built: the flush hook is a metric gauge.

    The writer's ``open()`` checks again on the worker (a cluster's own configuration may turn
    metrics off), where the error ends the job without restarts.
    """
    if str(j_env_conf.toMap().get("python.metric.enabled")).lower() == "false":
        raise ConfigurationError(
            f"sink '{config.sink_name}': python.metric.enabled=false disables the pre-barrier "
            "flush hook pyflink-gcp relies on for at-least-once delivery; enable it."
        )


def check_carry(config: SinkConfig, keyed: str | None) -> None:
    """Refuse ``max_carry_time`` where carried records could be lost or misplaced
    (:mod:`pyflink_gcp.core.carry`).

    Args:
        config: The sink's configuration.
        keyed: What keys the writer's input, for the message (``"a keyed stream"``, a SQL
            table's primary key); None: its input is not keyed.

    Raises:
        ConfigurationError: Naming the sink and why.
    """
    if not config.carry.enabled:
        return
    why = None
    if keyed is not None:
        why = (
            f"on {keyed}: the carried records are operator state, which a new "
            "parallelism hands out without regard to keys, so a key's records could change "
            "subtask and order"
        )
    elif commits(config.factory):
        why = (
            f"with {type(config.factory).__name__}: an exactly-once write commits every "
            "record of a checkpoint after it, so none can wait"
        )
    elif config.write_results:
        why = "with write_with_results(): the results count what each checkpoint wrote"
    if why is not None:
        raise ConfigurationError(
            f"sink '{config.sink_name}': max_carry_time is not available {why}; leave it "
            "unset (None)"
        )


def _warn_carry_in_jobmanager_memory(j_env_conf: Any, config: SinkConfig) -> None:
    """Say, when the job is built, that carried records need checkpoints on a file system.

    Without a checkpoint directory Flink keeps checkpoints in the JobManager's memory, which
    refuses an operator's state over 5 MB: a subtask carrying tens of thousands of records
    fails its checkpoints, and the job restarts from the last one that fitted.
    """
    if not config.carry.enabled:
        return
    conf = j_env_conf.toMap()
    storage = str(conf.get("execution.checkpointing.storage") or "").lower()
    directory = conf.get("execution.checkpointing.dir") or conf.get("state.checkpoints.dir")
    if storage == "jobmanager" or (not directory and storage != "filesystem"):
        _LOG.warning(
            "sink '%s': max_carry_time keeps the carried records in checkpoint state, but the "
            "job keeps its checkpoints in the JobManager's memory (no "
            "execution.checkpointing.dir), which fails a checkpoint whose operator state "
            "passes 5 MB; set execution.checkpointing.dir, or a max_carried_records that fits",
            config.sink_name,
        )


def _require_no_bridge(config: SinkConfig) -> None:
    """Refuse, when the job is built, a sink that cannot run without the bridge's operator.

    A write method that commits after the checkpoint completes (exactly once) needs the
    operator's checkpoint ids; without them it could only fail on the worker, record after
    record. The hook for such methods: a sink sets ``SinkConfig.requires_bridge``.
    """
    needs = config.requires_bridge
    if needs is None and commits(config.factory):
        needs = f"{type(config.factory).__name__} (it commits after each checkpoint)"
    if needs is None and config.carry.enabled:
        needs = "max_carry_time (the carried records are the operator's state)"
    if needs is None:
        return
    if not config.checkpoint_markers:
        why = "set_checkpoint_markers(False) turns it off"
    else:
        why = (
            "the Java bridge jar is unavailable (see the warning above; `pyflink-gcp bridge "
            "build` compiles it with a JDK)"
        )
    raise ConfigurationError(
        f"sink '{config.sink_name}': {needs} needs the writer to run as the "
        f"Java bridge's checkpoint-marker operator, but {why}"
    )


def _warn_restarts_not_suppressed(config: SinkConfig) -> None:
    """Say, once per sink when the job is built, that its errors cannot end the job at once.

    Without the bridge's operator nothing turns a non-retriable error into Flink's
    ``SuppressRestartsException``, so under a restart strategy (unbounded by default once
    checkpointing is on) a resolver returning None or a missing destination restarts the job
    again and again; the warning is the only place a user learns that before it happens.
    """
    if not config.checkpoint_markers:
        why = "set_checkpoint_markers(False)"
    else:
        why = "the Java bridge jar is unavailable"
    _LOG.warning(
        "sink '%s': the writer runs as PyFlink's own Python operator (%s), which cannot stop "
        "Flink's restart strategy: configuration and contract errors (a resolver returning "
        "None, a serializer raising, a destination missing under CREATE_NEVER, a creation "
        "bound reached) restart the job like transient errors until the restart strategy "
        "gives up, instead of ending it once",
        config.sink_name,
        why,
    )


def _marker_operator_class(
    ds: DataStream, config: SinkConfig, j_input_type: Any, j_env_conf: Any
) -> tuple[Any, bool]:
    """The bridge's marker operator class when this writer can use it (else None), and whether
    its records (a keyed stream's values) are typed, that is, not pickled Python objects."""
    from pyflink.common.typeinfo import Types
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    if not config.checkpoint_markers:
        return None, False
    pickled = Types.PICKLED_BYTE_ARRAY().get_java_type_info()
    keyed = isinstance(ds, KeyedStream)
    # On a keyed stream the input is the row (key, value): the value's type decides.
    value_type = j_input_type.getTypeAt(1) if keyed else j_input_type
    typed = not value_type.equals(pickled)
    jar = bridge_jar()
    if jar is None:
        return None, False
    url = jar.as_uri()
    add_jars_to_context_class_loader([url])
    # Ship the jar with the job, as StreamExecutionEnvironment.add_jars does.
    jvm = get_gateway().jvm
    key = jvm.org.apache.flink.configuration.PipelineOptions.JARS.key()
    jars = Configuration.parse_list_value(j_env_conf.getString(key, None))
    if url not in jars:
        j_env_conf.setString(key, str([*jars, url]))
    return _java_class(KEYED_MARKER_OPERATOR if keyed else MARKER_OPERATOR), typed


def _java_class(name: str) -> Any:
    from pyflink_gcp.core.bridge import java_class

    return java_class(name)


class _WriterTransformer(StreamTransformer):
    def __init__(self, sink: DynamicSink) -> None:
        self._sink = sink

    def apply(self, ds: DataStream) -> DataStream:
        config = self._sink._sink_config()
        if config.failure_handler.streams_failures:
            raise ConfigurationError(
                f"sink '{config.sink_name}': FailureHandler.to_stream() hands failed records "
                "to the stream sink.write_with_results(ds).failed() returns; ds.sink_to(sink) "
                "has none, so use write_with_results (or another failure handler)"
            )
        out = add_writer_operator(ds, config, f"{self._sink.name}: Writer")
        if self._sink._j_function is None:
            # Datasets known now (a fixed destination) go to Flink's lineage graph.
            self._sink._j_function = lineage_end_sink(config, out)
        return out


class DynamicSink(Sink, SupportsPreprocessing):
    """Base of every pyflink-gcp sink: what ``ds.sink_to(...)`` accepts.

    Subclasses hold a :class:`SinkConfig` built by their builder. The Java side is a discarding
    sink; all writing happens in the Python writer operator the transformer adds.
    """

    def __init__(self, config: SinkConfig) -> None:
        # The Java DiscardingSink is created on first use so that build() needs no JVM.
        self._config = config
        self._j_function = None

    def get_java_function(self) -> Any:
        if self._j_function is None:
            from pyflink.java_gateway import get_gateway

            jvm = get_gateway().jvm
            self._j_function = jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink()
        return self._j_function

    @property
    def name(self) -> str:
        return self._config.sink_name

    def _sink_config(self) -> SinkConfig:
        return self._config

    def get_transformer(self) -> StreamTransformer:
        return _WriterTransformer(self)

    def write_with_results(self, ds: DataStream) -> WriteResultStream:
        """Write ``ds`` as ``ds.sink_to(self)`` does, and return the stream of what each
        checkpoint wrote: one :class:`~pyflink_gcp.core.results.WriteResult` per destination
        and checkpoint (per writer subtask at least once; after the commit, per committer
        subtask, for an exactly-once write method). ``.failed()`` on it gives the records the
        failure handler :meth:`~pyflink_gcp.core.failure.FailureHandler.to_stream` hands over.

        Needs the Java bridge's checkpoint-marker operator (see
        :mod:`pyflink_gcp.core.result_stream`).
        """
        from pyflink_gcp.core.result_stream import write_with_results

        return write_with_results(ds, self._sink_config(), f"{self.name}: Writer")

    def __repr__(self) -> str:
        """One line: the sink type and name, how it writes as far as its configuration says
        (write method, create disposition, ordering, endpoints) and its destination (the fixed
        one, or the type the resolver returns), e.g. ``BigQuerySink(name='orders',
        write_method=FILE_LOADS, create_disposition=CREATE_IF_NEEDED,
        destination=TableDestination)``."""
        config = self._config
        factory = config.factory
        parts = [f"name={self.name!r}"]
        # The exactly-once methods are what the sink needs the bridge for; BigQuery's
        # default-stream factory is the at-least-once one.
        method = getattr(factory, "write_method", None) or config.requires_bridge
        if method is None and type(factory).__name__ == "BigQueryWriterFactory":
            method = "STORAGE_API_AT_LEAST_ONCE"
        if method is not None:
            parts.append(f"write_method={getattr(method, 'name', str(method).rpartition('.')[2])}")
        disposition = getattr(factory, "create_disposition", None)
        if disposition is None and "create_options" in vars(factory):
            # Bigtable creates tables exactly when it has the column families to create them with.
            creates = vars(factory)["create_options"] is not None
            disposition = "CREATE_IF_NEEDED" if creates else "CREATE_NEVER"
        if disposition is not None:
            parts.append(f"create_disposition={getattr(disposition, 'name', disposition)}")
        ordering = getattr(factory, "ordering", None)
        if ordering is not None and getattr(ordering, "name", "NONE") != "NONE":
            parts.append(f"ordering={ordering.name}")
        for endpoint in ("endpoint", "storage_endpoint", "rest_endpoint", "admin_endpoint"):
            value = getattr(factory, endpoint, None)
            if value:
                parts.append(f"{endpoint}={value!r}")
        fixed = config.fixed_destination
        parts.append(
            f"destination={fixed!r}"
            if fixed is not None
            else f"destination={factory.destination_type.__name__}"
        )
        return f"{type(self).__name__}({', '.join(parts)})"
