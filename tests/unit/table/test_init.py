"""register(t_env): the bridge jar appended to pipeline.jars, never replacing what is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflink_gcp import table
from pyflink_gcp.core import bridge


class FakeConfig:
    def __init__(self, jars: str | None) -> None:
        self.values = {} if jars is None else {"pipeline.jars": jars}

    def get(self, key: str, default: str | None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeTableEnv:
    def __init__(self, jars: str | None) -> None:
        self.config = FakeConfig(jars)

    def get_config(self) -> FakeConfig:
        return self.config


@pytest.fixture
def jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    built = tmp_path / "pyflink-gcp-bridge.jar"
    monkeypatch.setattr(bridge, "require_jar", lambda: built)
    return built.as_uri()


def test_register_appends_the_jar_once(jar: str) -> None:
    t_env = FakeTableEnv("file:///opt/kafka.jar;file:///opt/other.jar")
    assert table.register(t_env) == jar
    assert table.register(t_env) == jar
    expected = f"file:///opt/kafka.jar;file:///opt/other.jar;{jar}"
    assert t_env.config.values["pipeline.jars"] == expected


def test_register_sets_the_jar_when_none_is_configured(jar: str) -> None:
    t_env = FakeTableEnv(None)
    table.register(t_env)
    assert t_env.config.values["pipeline.jars"] == jar
