"""Building the Java bridge jar: compiled from its sources, rebuilt only when they change.

Each test builds from a copy of ``java-bridge/`` into its own directory (real ``javac`` against
the wheel's Flink jars), so the jar the jobs use is never touched.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.tools import bridge_build

needs_javac = pytest.mark.skipif(
    shutil.which("javac", path=bridge_build.java_path()) is None, reason="no JDK (javac)"
)
CLASSES = {
    "dev/pyflinkgcp/bridge/CheckpointMarkerProcessOperator.class",
    "dev/pyflinkgcp/bridge/KeyedCheckpointMarkerProcessOperator.class",
    "dev/pyflinkgcp/bridge/CheckpointMarkers.class",
    "dev/pyflinkgcp/bridge/NonRetriableErrors.class",
    "dev/pyflinkgcp/bridge/BundleSettings.class",
    "dev/pyflinkgcp/bridge/CarryState.class",
    "dev/pyflinkgcp/bridge/CommitterProcessOperator.class",
    "dev/pyflinkgcp/bridge/ForwardingOutput.class",
    "dev/pyflinkgcp/bridge/KeepingOutput.class",
    "dev/pyflinkgcp/bridge/LineageDiscardingSink.class",
    "dev/pyflinkgcp/bridge/LineageDiscardingSink$ConfigFacet.class",
    "dev/pyflinkgcp/bridge/LineageState.class",
    "dev/pyflinkgcp/bridge/LineageState$Capturing.class",
    "dev/pyflinkgcp/bridge/RunningFlush.class",
    "dev/pyflinkgcp/bridge/RunningFlush$Closer.class",
    "dev/pyflinkgcp/bridge/SlotWorkerLease.class",
    "dev/pyflinkgcp/bridge/StateParameter.class",
    "dev/pyflinkgcp/bridge/WriterFusion.class",
    "dev/pyflinkgcp/bridge/table/GcpTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/GcpTableSink.class",
    "dev/pyflinkgcp/bridge/table/GcpTableSink$1.class",
    "dev/pyflinkgcp/bridge/table/PubSubTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/BigQueryTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/BigtableTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/CloudTasksTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/SpannerTableSinkFactory.class",
    "dev/pyflinkgcp/bridge/table/TableOptions.class",
    "dev/pyflinkgcp/bridge/table/TableOptions$Spec.class",
    "dev/pyflinkgcp/bridge/table/TableRows.class",
    "dev/pyflinkgcp/bridge/table/TableRows$1.class",
    "dev/pyflinkgcp/bridge/table/TableRows$Conversion.class",
    "dev/pyflinkgcp/bridge/table/WriterPayload.class",
}
#: The project's own jar and digest (the scratch fixture moves the build elsewhere).
PROJECT_JAR, PROJECT_DIGEST = bridge_build.JAR, bridge_build.DIGEST
#: Generated from pyflink_gcp/table/options.py: the SQL connectors' options and factories.
RESOURCES = {
    "META-INF/pyflink-gcp/table-options.json",
    "META-INF/services/org.apache.flink.table.factories.Factory",
}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The bridge's sources copied to a scratch directory, and where their jar goes."""
    sources = tmp_path / "java"
    shutil.copytree(bridge_build.SOURCES, sources)
    jar = tmp_path / "jars" / "pyflink-gcp-bridge.jar"
    monkeypatch.setattr(bridge_build, "SOURCES", sources)
    monkeypatch.setattr(bridge_build, "JAR", jar)
    monkeypatch.setattr(bridge_build, "DIGEST", jar.with_name(jar.name + ".sha256"))
    return sources, jar


def built_from_scratch_copy(jar: Path) -> None:
    """A built jar for the scratch sources, compiled only if the project's is out of date.

    The digest covers the sources by their path relative to the sources directory, so the
    project's jar and digest, copied beside the scratch copy, are up to date for it: the build
    then leaves them alone instead of compiling the same sources once more.
    """
    if PROJECT_JAR.is_file() and PROJECT_DIGEST.is_file():
        jar.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_JAR, jar)
        shutil.copy2(PROJECT_DIGEST, bridge_build.DIGEST)
    assert bridge_build.build() == jar


def without_javac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))


@needs_javac
def test_build_compiles_every_operator_and_skips_an_up_to_date_jar(scratch):
    sources, jar = scratch
    assert bridge_build.build() == jar
    assert set(zipfile.ZipFile(jar).namelist()) == {"META-INF/MANIFEST.MF", *CLASSES, *RESOURCES}
    built = (jar.read_bytes(), jar.stat().st_mtime_ns)
    assert bridge_build.build() == jar
    assert (jar.read_bytes(), jar.stat().st_mtime_ns) == built  # up to date: left alone

    markers = next(sources.rglob("CheckpointMarkers.java"))
    markers.write_text(markers.read_text() + "\n// a changed source\n")
    digest = bridge_build.DIGEST.read_text()
    bridge_build.build()
    assert bridge_build.DIGEST.read_text() != digest  # rebuilt from the changed source
    assert not list(jar.parent.glob(".*.part"))  # the jar and its digest replaced whole


@needs_javac
def test_the_generated_option_list_is_part_of_the_digest(scratch, tmp_path, monkeypatch):
    """A changed option list rebuilds the jar, whose resource then holds the new list."""
    _, jar = scratch
    built_from_scratch_copy(jar)
    options = tmp_path / "options.py"
    # options.py imports its siblings; the writer's defaults are in option_groups.py.
    for sibling in ("options.py", "option_model.py"):
        source = bridge_build.TABLE_OPTIONS.with_name(sibling)
        (tmp_path / sibling).write_text(source.read_text())
    groups = bridge_build.TABLE_OPTIONS.with_name("option_groups.py")
    (tmp_path / groups.name).write_text(
        groups.read_text().replace('max_rows: str = "20000"', 'max_rows: str = "12345"')
    )
    monkeypatch.setattr(bridge_build, "TABLE_OPTIONS", options)
    digest = bridge_build.DIGEST.read_text()
    bridge_build.build()
    assert bridge_build.DIGEST.read_text() != digest
    with zipfile.ZipFile(jar) as built:
        listed = built.read("META-INF/services/org.apache.flink.table.factories.Factory")
        assert b'"default": "12345"' in built.read("META-INF/pyflink-gcp/table-options.json")
    assert listed.decode().split() == [
        "dev.pyflinkgcp.bridge.table.PubSubTableSinkFactory",
        "dev.pyflinkgcp.bridge.table.BigQueryTableSinkFactory",
        "dev.pyflinkgcp.bridge.table.BigtableTableSinkFactory",
        "dev.pyflinkgcp.bridge.table.CloudTasksTableSinkFactory",
        "dev.pyflinkgcp.bridge.table.SpannerTableSinkFactory",
    ]


@needs_javac
def test_a_failed_compilation_names_the_error(scratch):
    sources, _ = scratch
    broken = next(sources.rglob("CheckpointMarkers.java"))
    broken.write_text(broken.read_text().replace("return typed;", "return typo;"))
    with pytest.raises(ConfigurationError, match="compiling the Java bridge failed") as error:
        bridge_build.build()
    assert "CheckpointMarkers.java" in str(error.value) and "typo" in str(error.value)


def test_without_a_jdk_the_build_names_the_jdk(scratch, tmp_path, monkeypatch):
    without_javac(tmp_path, monkeypatch)
    with pytest.raises(ConfigurationError, match="javac was not found"):
        bridge_build.build()


def test_an_installed_package_uses_the_jar_it_ships(tmp_path, monkeypatch):
    """No sources next to the package: the shipped jar is used as it is, no JDK needed."""
    without_javac(tmp_path, monkeypatch)
    monkeypatch.setattr(bridge_build, "SOURCES", tmp_path / "no-sources")
    shipped = tmp_path / "pyflink-gcp-bridge.jar"
    monkeypatch.setattr(bridge_build, "JAR", shipped)
    with pytest.raises(ConfigurationError, match="no Java bridge sources"):
        bridge_build.build()
    shipped.write_bytes(b"PK")
    assert bridge_build.build() == shipped
