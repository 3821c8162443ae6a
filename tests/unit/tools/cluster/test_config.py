"""Writing a standalone cluster's configuration directory and its processes' environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pyflink_gcp.tools.cluster.config import (
    ClusterLayout,
    ClusterPorts,
    ClusterSettings,
    cluster_config,
    flatten,
    flink_home,
    process_env,
    write_conf_dir,
)

#: A config.yaml shaped like the apache-flink wheel's: nested keys, localhost, fixed ports.
WHEEL_CONFIG = """\
env:
  java:
    opts:
      all: --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
jobmanager:
  bind-host: localhost
  rpc:
    address: localhost
    port: 6123
  memory:
    process:
      size: 1600m
  execution:
    failover-strategy: region
taskmanager:
  bind-host: localhost
  host: localhost
  numberOfTaskSlots: 1
rest:
  address: localhost
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    conf = tmp_path / "home" / "conf"
    conf.mkdir(parents=True)
    (conf / "config.yaml").write_text(WHEEL_CONFIG)
    (conf / "log4j-console.properties").write_text("rootLogger.level = INFO\n")
    (conf / "masters").write_text("localhost:8081\n")
    (conf / "workers").write_text("localhost\n")
    return tmp_path / "home"


@pytest.fixture
def layout(tmp_path: Path) -> ClusterLayout:
    return ClusterLayout(tmp_path / "cluster")


PORTS = ClusterPorts(rpc=40001, rest=40002, blob=40003)


def test_flatten_gives_one_dotted_key_per_leaf() -> None:
    tree = {"a": {"b": {"c": 1}, "d": "x"}, "e.f": 2}
    assert flatten(tree) == {"a.b.c": 1, "a.d": "x", "e.f": 2}


def test_configuration_uses_loopback_and_the_chosen_ports(layout: ClusterLayout) -> None:
    settings = ClusterSettings(slots=3, python="/venv/bin/python")
    config = cluster_config(settings, PORTS, layout)
    for key in (
        "jobmanager.rpc.address",
        "jobmanager.bind-host",
        "taskmanager.host",
        "taskmanager.bind-host",
        "rest.address",
        "rest.bind-address",
    ):
        assert config[key] == "127.0.0.1", key
    assert config["jobmanager.rpc.port"] == 40001
    assert config["rest.port"] == 40002
    assert config["blob.server.port"] == "40003"
    # Each TaskManager binds what the kernel gives it: two on one machine cannot clash.
    assert config["taskmanager.rpc.port"] == "0"
    assert config["taskmanager.data.port"] == 0
    assert config["taskmanager.numberOfTaskSlots"] == 3
    assert config["python.executable"] == config["python.client.executable"] == "/venv/bin/python"
    assert config["execution.checkpointing.dir"] == (layout.root / "checkpoints").as_uri()
    # Recovery in seconds: a refused heartbeat twice in a row declares a TaskManager lost, and
    # the first restart comes after 100 ms, backing off when failures repeat within 5 s.
    assert config["restart-strategy.type"] == "exponential-delay"
    assert config["restart-strategy.exponential-delay.initial-backoff"] == "100 ms"
    assert config["restart-strategy.exponential-delay.max-backoff"] == "10 s"
    assert config["restart-strategy.exponential-delay.reset-backoff-threshold"] == "5 s"
    assert config["restart-strategy.exponential-delay.attempts-before-reset-backoff"] == 20
    assert config["jobmanager.execution.failover-strategy"] == "region"
    assert config["heartbeat.interval"] == "1 s"
    assert config["heartbeat.timeout"] == "15 s"
    assert config["heartbeat.rpc-failure-threshold"] == 2
    # A restart waits for a replacement TaskManager however old the cluster is.
    assert config["resourcemanager.standalone.start-up-time"] == "0 ms"


def test_extra_entries_win(layout: ClusterLayout) -> None:
    settings = ClusterSettings(extra={"heartbeat.timeout": "30 s", "state.backend.type": "rocksdb"})
    config = cluster_config(settings, PORTS, layout)
    assert config["heartbeat.timeout"] == "30 s"
    assert config["state.backend.type"] == "rocksdb"


def test_conf_dir_is_the_wheels_rewritten_with_flat_keys(home: Path, layout: ClusterLayout) -> None:
    overrides = cluster_config(ClusterSettings(), PORTS, layout)
    path = write_conf_dir(home, layout, overrides)

    text = path.read_text()
    written = yaml.safe_load(text)
    # Flat keys only: a nested "jobmanager:" left beside "jobmanager.rpc.address" would be
    # the same key twice in two spellings.
    assert all(not isinstance(value, dict) for value in written.values())
    assert written["jobmanager.rpc.address"] == "127.0.0.1"
    assert written["jobmanager.rpc.port"] == 40001
    assert written["jobmanager.memory.process.size"] == "1024m"
    assert written["taskmanager.numberOfTaskSlots"] == 2
    # What the package does not set is kept from the wheel, long values on one line.
    assert written["jobmanager.execution.failover-strategy"] == "region"
    opts = written["env.java.opts.all"]
    assert opts.startswith("--add-opens=java.base/java.lang") and opts.endswith("ALL-UNNAMED")
    assert any(line.startswith("env.java.opts.all: --add-opens") for line in text.splitlines())
    assert (layout.conf / "log4j-console.properties").read_text() == "rootLogger.level = INFO\n"
    assert (layout.conf / "masters").read_text() == "127.0.0.1:40002\n"
    assert (layout.conf / "workers").read_text() == "127.0.0.1\n"
    # The wheel's own configuration is untouched.
    assert (home / "conf" / "config.yaml").read_text() == WHEEL_CONFIG


def test_process_env_drops_inherited_flink_variables(layout: ClusterLayout) -> None:
    base = {
        "PATH": "/usr/bin",
        "FLINK_HOME": "/opt/other-flink",
        "FLINK_CONF_DIR": "/opt/other-flink/conf",
        "_FLINK_HOME_DETERMINED": "1",
        "PYFLINK_GATEWAY_PORT": "25333",
        "_python_worker_execution_mode": "loopback",
    }
    extra = {"PUBSUB_EMULATOR_HOST": "127.0.0.1:8085", "FLINK_CONF_DIR": "/elsewhere"}
    env = process_env(base, extra, layout, "taskmanager-1")
    assert env["PATH"] == "/usr/bin"
    assert env["PUBSUB_EMULATOR_HOST"] == "127.0.0.1:8085"
    for name in ("FLINK_HOME", "_FLINK_HOME_DETERMINED", "PYFLINK_GATEWAY_PORT"):
        assert name not in env, name
    assert "_python_worker_execution_mode" not in env
    # The cluster's own directories win over anything passed in.
    assert env["FLINK_CONF_DIR"] == str(layout.conf)
    assert env["FLINK_LOG_DIR"] == str(layout.log)
    assert env["FLINK_PID_DIR"] == str(layout.pid)
    assert env["FLINK_IDENT_STRING"] == "taskmanager-1"


def test_chosen_ports_are_distinct() -> None:
    ports = ClusterPorts.choose()
    assert len({ports.rpc, ports.rest, ports.blob}) == 3


@pytest.mark.parametrize("field,value", [("taskmanagers", -1), ("slots", 0)])
def test_settings_reject_impossible_sizes(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        ClusterSettings(**{field: value})  # type: ignore[arg-type]


def test_flink_home_is_the_wheels_distribution() -> None:
    home = flink_home()
    assert (home / "bin" / "taskmanager.sh").is_file()
    assert (home / "lib").is_dir() and (home / "opt").is_dir()
