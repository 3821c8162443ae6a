"""The Java bridge: the jar holding the writer's checkpoint-marker operators.

The operators (``java-bridge/``: ``dev.pyflinkgcp.bridge.CheckpointMarkerProcessOperator`` and
its keyed twin) are PyFlink's process-mode Python operators plus one thing: they put a marker
element into the writer's input just before each checkpoint barrier and at the end of input.
Each takes PyFlink's constructor arguments plus ``(tag, typed)``: the marker's tag, and whether
the records are typed (then they go as they are and a marker as an element without a value,
:func:`~pyflink_gcp.core.operators.bare_marker_id`). The writer then waits for its
writes only at those markers instead of at every bundle end (see :mod:`pyflink_gcp.core.operators`).
They also take the line a Python error a restart cannot fix carries
(:data:`~pyflink_gcp.core.errors.NON_RETRIABLE_MARKER`) and end the job on such an error
without Flink's restart loop (``NonRetriableErrors``). The jar also holds the SQL connectors
(``dev.pyflinkgcp.bridge.table``: a table sink factory per connector, listed in the factory
services file, reading the option list generated from :mod:`pyflink_gcp.table.options`).

This module names the jar and its classes; it builds nothing. Every wheel ships the jar, compiled
against the Flink it requires; in a source checkout ``make setup`` (``pyflink-gcp bridge build``,
:mod:`pyflink_gcp.tools.bridge_build`) compiles it and rebuilds it when its sources, the SQL
connectors' option list or the Flink version change. Without the jar the sinks still run,
waiting for their writes at every bundle end.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError

__all__ = [
    "COMMITTER_OPERATOR",
    "JAR",
    "KEYED_MARKER_OPERATOR",
    "MARKERS",
    "MARKER_OPERATOR",
    "bridge_jar",
    "java_class",
    "require_jar",
]

_LOG = logging.getLogger("pyflink_gcp.bridge")

#: The operator classes inside the jar (plain and keyed streams, each of pickled or typed
#: records); both take ``(config, function, input type, output type, tag, typed,
#: non-retriable marker)``.
MARKER_OPERATOR = "dev.pyflinkgcp.bridge.CheckpointMarkerProcessOperator"
KEYED_MARKER_OPERATOR = "dev.pyflinkgcp.bridge.KeyedCheckpointMarkerProcessOperator"
#: The commit half of an exactly-once sink (:mod:`pyflink_gcp.core.commit`); it takes
#: ``(config, function, input type, output type, commit tag, checkpointing, non-retriable
#: marker)``.
COMMITTER_OPERATOR = "dev.pyflinkgcp.bridge.CommitterProcessOperator"
#: What a marker is and when one is due, shared by both operators.
MARKERS = "dev.pyflinkgcp.bridge.CheckpointMarkers"

#: Lookups of a bridge class, each after adding the jar to the serving thread's loader.
_CLASS_ATTEMPTS = 4

_PACKAGE = Path(__file__).resolve().parents[1]
#: Where the jar lives: inside the package, so every wheel carries it.
JAR = _PACKAGE / "jars" / "pyflink-gcp-bridge.jar"


def require_jar() -> Path:
    """The bridge jar.

    Raises:
        ConfigurationError: There is none: a source checkout where it was not built yet.
    """
    if not JAR.is_file():
        raise ConfigurationError(
            f"the pyflink-gcp Java bridge jar is missing ({JAR}); a source checkout builds it "
            "with `pyflink-gcp bridge build` (a JDK 11 or newer), every wheel ships it"
        )
    return JAR


def bridge_jar() -> Path | None:
    """The bridge jar; None (with a warning) when there is none."""
    try:
        return require_jar()
    except ConfigurationError as exc:
        _LOG.warning(
            "pyflink-gcp Java bridge unavailable (%s); writers wait for their writes at every "
            "bundle end instead of only at checkpoints",
            exc,
        )
        return None


def java_class(name: str) -> Any:
    """The JVM class ``name`` (dotted) through PyFlink's gateway, such as an operator above.

    The gateway finds classes through the context class loader of the Java thread that serves
    the call, and PyFlink adds a jar to that thread's loader only
    (``add_jars_to_context_class_loader``). Py4J serves a Python thread's calls on whichever of
    its connections is free, so a call made after another thread (or a garbage-collection
    callback) took the usual one lands on a thread whose loader lacks the bridge jar, and the
    name resolves to a package instead of a class. The jar is then added to that thread's
    loader and the name resolved again.
    """
    from py4j.java_gateway import JavaClass
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    node: Any = None
    for _ in range(_CLASS_ATTEMPTS):
        node = get_gateway().jvm
        for part in name.split("."):
            node = getattr(node, part)
        if isinstance(node, JavaClass) or not JAR.is_file():
            return node
        _LOG.debug("%s: not on this gateway thread's class path; adding the bridge jar", name)
        add_jars_to_context_class_loader([JAR.as_uri()])
    return node
