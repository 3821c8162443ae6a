"""The ``javac`` build of the Java bridge jar (:mod:`pyflink_gcp.core.bridge`).

The jar is compiled against the Flink jars inside the installed ``apache-flink`` wheel (or the
jars-only ``apache-flink-libraries`` of an isolated wheel build), so it always matches the Flink
classes that run it; no download is involved. Besides the classes it holds resources generated
from :mod:`pyflink_gcp.table.options`: the SQL connectors' option list and the factory services
file. A digest of the sources, those resources and the Flink jars' names is kept beside the jar,
and the build is skipped while it matches.

Two callers share it: ``pyflink-gcp bridge build`` (run by ``make setup`` in a source checkout)
and ``setup.py``, which compiles the jar into every wheel. ``setup.py`` loads this module by its
file path, with :mod:`pyflink_gcp.core.errors` and :mod:`pyflink_gcp.core.bridge`, because a
build environment has none of the package's dependencies: this module imports only the standard
library and those two modules (``pyflink`` only inside :func:`build`, for its jars).
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
import types
import zipfile
from pathlib import Path

from pyflink_gcp.core.bridge import JAR
from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER, ConfigurationError

__all__ = ["DIGEST", "SOURCES", "TABLE_OPTIONS", "build", "java_path"]

_LOG = logging.getLogger("pyflink_gcp.bridge")

_PACKAGE = Path(__file__).resolve().parents[1]
#: What the jar was built from (see :func:`build`), kept beside it.
DIGEST = JAR.with_name(JAR.name + ".sha256")
#: The bridge's Java sources; a source checkout has them, an installed package does not.
SOURCES = _PACKAGE.parent / "java-bridge" / "src" / "main" / "java"
#: The SQL connectors' option list, from which the jar's resources are generated.
TABLE_OPTIONS = _PACKAGE / "table" / "options.py"


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

    ``pyflink_gcp/table/options.py`` is loaded by its path (it needs only the standard library
    and its sibling ``option_model.py``, which it imports relatively: both are loaded as modules
    of a stand-in package whose path is their directory), so the wheel build, which has none of
    the package's dependencies, generates them too.
    """
    package = "_pyflink_gcp_table_options"
    name = f"{package}.options"
    spec = importlib.util.spec_from_file_location(name, TABLE_OPTIONS)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot load the SQL connectors' options from {TABLE_OPTIONS}")
    module = importlib.util.module_from_spec(spec)
    stand_in = types.ModuleType(package)
    stand_in.__path__ = [str(TABLE_OPTIONS.parent)]
    # Dataclasses look their module up while it executes; the relative import needs the package.
    sys.modules[package] = stand_in
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        resources: dict[str, str] = module.resource(NON_RETRIABLE_MARKER)
    finally:
        for loaded in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
            sys.modules.pop(loaded, None)
    return resources


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java")) if SOURCES.is_dir() else []


def _digest(sources: list[Path], flink_jars: list[Path], resources: dict[str, str]) -> str:
    """What the jar was built from: its sources, its generated resources and the Flink jars'
    names (their versions)."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.relative_to(SOURCES).as_posix().encode())
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
        raise ConfigurationError(f"no Java bridge sources under {SOURCES} and no jar at {JAR}")
    flink_jars = _flink_jars()
    resources = _resources()
    digest = _digest(sources, flink_jars, resources)
    if not force and JAR.is_file() and DIGEST.is_file() and DIGEST.read_text() == digest:
        return JAR
    javac = shutil.which("javac", path=java_path())
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
    partial_digest = DIGEST.with_name(f".{DIGEST.name}.{os.getpid()}.part")
    partial_digest.write_text(digest)
    partial_digest.replace(DIGEST)
    _LOG.info("built the Java bridge %s", JAR)
    return JAR


def java_path() -> str | None:
    """``JAVA_HOME/bin`` before ``PATH``: where ``javac`` (and ``java``) are looked up."""
    java_home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return os.pathsep.join([str(Path(java_home) / "bin"), path]) if java_home else path
