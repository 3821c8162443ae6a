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
