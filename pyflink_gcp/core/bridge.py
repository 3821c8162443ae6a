"""The Java bridge: the jar holding the writer's checkpoint-marker operators.

The operators (``java-bridge/``: ``dev.pyflinkgcp.bridge.CheckpointMarkerProcessOperator`` and
its keyed twin) are PyFlink's process-mode Python operators plus one thing: they put a marker
element into the writer's input just before each checkpoint barrier and at the end of input.
Each takes PyFlink's constructor arguments plus ``(tag, typed)``: the marker's tag, and whether
the records are typed (then wrapped in a row with the markers). The writer then waits for its
writes only at those markers instead of at every bundle end (see :mod:`pyflink_gcp.core.runtime`).
They also take the line a Python error a restart cannot fix carries
(:data:`~pyflink_gcp.core.errors.NON_RETRIABLE_MARKER`) and end the job on such an error
without Flink's restart loop (``NonRetriableErrors``). The jar also holds the SQL connectors
(``dev.pyflinkgcp.bridge.table``: a table sink factory per connector, listed in the factory
services file, reading the option list generated from :mod:`pyflink_gcp.table.options`).

The jar is compiled with ``javac`` against the Flink jars inside the installed ``apache-flink``
wheel, so it always matches the Flink classes that run it; no download is involved. In a source
checkout ``make setup`` builds it (``pyflink-gcp bridge build``), and it is rebuilt when its
sources, the SQL connectors' option list or the Flink version change. An installed package uses the jar it ships. Without a jar
and without a JDK the sinks still run, waiting at every bundle end.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER, ConfigurationError

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

_PACKAGE = Path(__file__).resolve().parents[1]
JAR = _PACKAGE / "jars" / "pyflink-gcp-bridge.jar"
_DIGEST = JAR.with_name(JAR.name + ".sha256")
_SOURCES = _PACKAGE.parent / "java-bridge" / "src" / "main" / "java"
#: The SQL connectors' option list, from which the jar's resources are generated.
_TABLE_OPTIONS = _PACKAGE / "table" / "options.py"


def _flink_jars() -> list[Path]:
    import pyflink

    root = Path(pyflink.__file__).resolve().parent
    # The table API jars: the SQL connectors' factories and sink (pyflink_gcp.table).
    lib = ("flink-dist", "flink-table-api-java-uber", "flink-table-runtime")
    jars = sorted((root / "opt").glob("flink-python-*.jar"))
    for name in lib:
        jars += sorted((root / "lib").glob(f"{name}-*.jar"))
    if len(jars) < 1 + len(lib):
        raise ConfigurationError(
            f"the apache-flink installation at {root} lacks one of flink-python, "
            f"{', '.join(lib)}; the Java bridge cannot be compiled against it"
        )
    return jars


def _resources() -> dict[str, str]:
    """The generated files of the jar: the SQL connectors' option list and the factory SPI file.

    ``pyflink_gcp/table/options.py`` is loaded by its path (it needs only the standard library),
    so the wheel build, which has none of the package's dependencies, generates them too.
    """
    name = "_pyflink_gcp_table_options"
    spec = importlib.util.spec_from_file_location(name, _TABLE_OPTIONS)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot load the SQL connectors' options from {_TABLE_OPTIONS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
        resources: dict[str, str] = module.resource(NON_RETRIABLE_MARKER)
    finally:
        sys.modules.pop(name, None)
    return resources


def _sources() -> list[Path]:
    return sorted(_SOURCES.rglob("*.java")) if _SOURCES.is_dir() else []


def _digest(sources: list[Path], flink_jars: list[Path], resources: dict[str, str]) -> str:
    """What the jar was built from: its sources, its generated resources and the Flink jars'
    names (their versions)."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.relative_to(_SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    for name, text in sorted(resources.items()):
        digest.update(name.encode())
        digest.update(text.encode())
    for jar in flink_jars:
        digest.update(jar.name.encode())
    return digest.hexdigest()


def build(force: bool = False) -> Path:
    """Compile the bridge jar from ``java-bridge/`` unless an up-to-date one exists.

    Returns:
        The jar's path.

    Raises:
        ConfigurationError: No sources (an installed package without a jar), no ``javac``, or
            the compilation failed (its output is in the message).
    """
    sources = _sources()
    if not sources:
        if JAR.is_file():
            return JAR
        raise ConfigurationError(f"no Java bridge sources under {_SOURCES} and no jar at {JAR}")
    flink_jars = _flink_jars()
    resources = _resources()
    digest = _digest(sources, flink_jars, resources)
    if not force and JAR.is_file() and _DIGEST.is_file() and _DIGEST.read_text() == digest:
        return JAR
    javac = shutil.which("javac", path=_java_path())
    if javac is None:
        raise ConfigurationError(
            "javac was not found (JAVA_HOME/bin or PATH); a JDK 11 or newer builds the bridge"
        )
    with tempfile.TemporaryDirectory(prefix="pyflink-gcp-bridge-") as tmp:
        classes = Path(tmp)
        command = [
            javac,
            "--release",
            "11",
            "-nowarn",
            "-cp",
            os.pathsep.join(str(jar) for jar in flink_jars),
            "-d",
            str(classes),
            *map(str, sources),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ConfigurationError(
                f"compiling the Java bridge failed ({done.returncode}):\n{done.stderr.strip()}"
            )
        JAR.parent.mkdir(parents=True, exist_ok=True)
        # A name of its own per process: two builds at once each replace the jar whole.
        partial = JAR.with_name(f".{JAR.name}.{os.getpid()}.part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
            for name, text in sorted(resources.items()):
                jar.writestr(name, text)
        partial.replace(JAR)
    partial_digest = _DIGEST.with_name(f".{_DIGEST.name}.{os.getpid()}.part")
    partial_digest.write_text(digest)
    partial_digest.replace(_DIGEST)
    _LOG.info("built the Java bridge %s", JAR)
    return JAR


def _java_path() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return os.pathsep.join([str(Path(java_home) / "bin"), path]) if java_home else path


def bridge_jar() -> Path | None:
    """The bridge jar, built first if needed; None (with a warning) when it cannot be had."""
    try:
        return build()
    except ConfigurationError as exc:
        _LOG.warning(
            "pyflink-gcp Java bridge unavailable (%s); writers wait for their writes at every "
            "bundle end instead of only at checkpoints",
            exc,
        )
        return None


def java_class(name: str) -> Any:
    """The JVM class ``name`` (dotted) through PyFlink's gateway, such as an operator above."""
    from pyflink.java_gateway import get_gateway

    node: Any = get_gateway().jvm
    for part in name.split("."):
        node = getattr(node, part)
    return node
