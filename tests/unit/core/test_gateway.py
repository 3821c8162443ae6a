"""The gateway's standard-error drain, on real pipes and a real child process (PyFlink's launch
functions replaced by small ones that start the child)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from pyflink import java_gateway

from pyflink_gcp.core import gateway
from pyflink_gcp.core.gateway import GatewayStderrDrain, drain_gateway_stderr

_WRITE_200K = "import sys; sys.stderr.write('e' * 200_000); sys.stderr.flush()"


def test_the_drain_reads_everything_written_until_the_pipe_closes() -> None:
    read_end, write_end = os.pipe()
    got: list[bytes] = []
    with os.fdopen(read_end, "rb") as pipe:
        drain = GatewayStderrDrain(pipe, got.append, limit=None)
        drain.start()
        payload = b"z" * (1024 * 1024)
        os.write(write_end, payload)  # blocks unless the drain reads: far beyond a pipe's size
        os.close(write_end)
        drain.join(10)
    assert not drain.is_alive()
    assert b"".join(got) == payload
    assert drain.bytes_read == len(payload) and drain.bytes_dropped == 0


def test_a_bounded_target_takes_up_to_its_limit_and_the_rest_is_still_read() -> None:
    read_end, write_end = os.pipe()
    got: list[bytes] = []
    with os.fdopen(read_end, "rb") as pipe:
        drain = GatewayStderrDrain(pipe, got.append, limit=100_000)
        drain.start()
        for _ in range(4):
            os.write(write_end, b"a" * 60_000)
        os.close(write_end)
        drain.join(10)
    assert drain.bytes_read == 240_000
    assert sum(map(len, got)) <= 100_000
    assert drain.bytes_dropped == 240_000 - sum(map(len, got))


def test_a_failing_target_does_not_stop_the_draining() -> None:
    read_end, write_end = os.pipe()

    def broken(chunk: bytes) -> None:
        raise OSError("disk full")

    with os.fdopen(read_end, "rb") as pipe:
        drain = GatewayStderrDrain(pipe, broken, limit=None)
        drain.start()
        os.write(write_end, b"b" * 300_000)
        os.close(write_end)
        drain.join(10)
    assert drain.bytes_read == 300_000 == drain.bytes_dropped


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """No drain installed yet and no gateway running; PyFlink's launch functions restored after."""
    monkeypatch.setattr(gateway, "_installed", False)
    monkeypatch.setattr(gateway, "drains", [])
    monkeypatch.setattr(java_gateway, "_gateway", None)
    children: list[Any] = []

    def start_process(env: dict[str, str], args: list[str]) -> Any:
        child = subprocess.Popen([sys.executable, "-c", args[0]], stderr=subprocess.PIPE)
        children.append(child)
        return child

    def launch(script: str = _WRITE_200K) -> str:
        child = java_gateway.launch_gateway_server_process({}, [script])
        if script == "exit":
            child.wait(10)
            raise RuntimeError("Java gateway process exited before sending its port number.")
        return "gateway"

    monkeypatch.setattr(java_gateway, "launch_gateway_server_process", start_process)
    monkeypatch.setattr(java_gateway, "launch_gateway", launch)
    return children


def test_installed_before_the_gateway_it_drains_the_gateway_started_next(
    fresh: list[Any], tmp_path: Any
) -> None:
    target = tmp_path / "gateway.log"
    drain_gateway_stderr(str(target))
    assert java_gateway.launch_gateway() == "gateway"
    child = fresh[0]
    assert child.wait(20) == 0, "the child blocked on its full stderr pipe"
    (drain,) = gateway.drains
    drain.join(10)
    assert drain.bytes_read == 200_000
    assert target.read_bytes() == b"e" * 200_000


def test_installing_twice_wraps_once(fresh: list[Any], tmp_path: Any) -> None:
    drain_gateway_stderr(str(tmp_path / "a.log"))
    wrapped = java_gateway.launch_gateway
    drain_gateway_stderr(str(tmp_path / "b.log"))
    assert java_gateway.launch_gateway is wrapped


def test_a_gateway_that_dies_while_starting_keeps_its_error_and_gets_no_drain(
    fresh: list[Any], tmp_path: Any
) -> None:
    drain_gateway_stderr(str(tmp_path / "gateway.log"))
    with pytest.raises(RuntimeError, match="exited before sending its port"):
        java_gateway.launch_gateway("exit")
    assert gateway.drains == []


def test_too_late_once_the_gateway_runs(monkeypatch: pytest.MonkeyPatch, fresh: list[Any]) -> None:
    monkeypatch.setattr(java_gateway, "_gateway", object())
    with pytest.raises(RuntimeError, match="before the first StreamExecutionEnvironment"):
        drain_gateway_stderr()


def test_without_a_file_the_output_goes_to_descriptor_2(
    fresh: list[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    drain_gateway_stderr()
    java_gateway.launch_gateway()
    fresh[0].wait(20)
    gateway.drains[0].join(10)
    assert capfd.readouterr().err == "e" * 200_000


def test_the_drain_threads_are_daemons() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as pipe:
        drain = GatewayStderrDrain(pipe, lambda chunk: None, limit=None)
        assert drain.daemon and drain.name == "pyflink-gateway-stderr"
        os.close(write_end)
        drain.start()
        drain.join(5)
    assert not drain.is_alive()


def test_a_gateway_that_ended_is_reported_with_how_it_ended(
    fresh: list[Any], tmp_path: Any
) -> None:
    drain_gateway_stderr(str(tmp_path / "gateway.log"))
    java_gateway.launch_gateway("import time; time.sleep(60)")
    assert gateway.ended_gateways() == []  # still running
    fresh[0].send_signal(signal.SIGTERM)
    fresh[0].wait(10)
    assert gateway.ended_gateways() == [f"pid {fresh[0].pid} ended: signal SIGTERM (15)"]
