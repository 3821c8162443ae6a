"""The Java bridge jar as the library finds it: looked up, never built."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pyflink_gcp.core import ConfigurationError, bridge


def test_the_jar_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "pyflink-gcp-bridge.jar"
    shipped.write_bytes(b"PK")
    monkeypatch.setattr(bridge, "JAR", shipped)
    assert bridge.require_jar() == shipped
    assert bridge.bridge_jar() == shipped


def test_without_a_jar_the_sinks_get_none_and_a_warning_naming_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(bridge, "JAR", tmp_path / "missing.jar")
    with pytest.raises(ConfigurationError, match="`pyflink-gcp bridge build`"):
        bridge.require_jar()
    with caplog.at_level(logging.WARNING, logger="pyflink_gcp.bridge"):
        assert bridge.bridge_jar() is None
    assert "Java bridge unavailable" in caplog.text and "missing.jar" in caplog.text


def test_the_jar_ships_inside_the_package() -> None:
    assert bridge.JAR.parent.name == "jars"
    assert bridge.JAR.parent.parent == Path(bridge.__file__).resolve().parents[1]


def test_a_bridge_class_resolves_on_a_gateway_thread_whose_loader_lacks_the_jar() -> None:
    """Py4J may serve a call on another Java thread than the one PyFlink added the jar to (a
    free connection of its pool): its context class loader then lacks the jar."""
    from py4j.java_gateway import JavaClass
    from pyflink.java_gateway import get_gateway

    if not bridge.JAR.is_file():
        pytest.skip("the bridge jar is not built")
    jvm = get_gateway().jvm
    thread = jvm.Thread.currentThread()
    original = thread.getContextClassLoader()
    thread.setContextClassLoader(jvm.ClassLoader.getSystemClassLoader())
    try:
        plain: object = jvm
        for part in bridge.MARKERS.split("."):
            plain = getattr(plain, part)
        assert not isinstance(plain, JavaClass)  # what the lookup met before it retried

        markers = bridge.java_class(bridge.MARKERS)

        assert isinstance(markers, JavaClass)
        assert markers.END_OF_INPUT == -1
    finally:
        jvm.Thread.currentThread().setContextClassLoader(original)
