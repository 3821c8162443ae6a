"""Channel opening: plain text to an emulator, the generated transport's TLS channel otherwise."""

from __future__ import annotations

import grpc

from pyflink_gcp.core.channels import UNLIMITED_MESSAGES, channel_target, open_channel
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint


class _Transport:
    """Stands in for a generated transport class: records what the TLS path asked for."""

    calls: list[tuple[str, list]] = []

    @classmethod
    def create_channel(cls, target, options):
        cls.calls.append((target, options))
        return "tls-channel"


def test_an_emulator_endpoint_gets_an_insecure_channel(monkeypatch):
    monkeypatch.setenv("SOME_EMULATOR_HOST", "127.0.0.1:1")
    endpoint = resolve_endpoint(None, "SOME_EMULATOR_HOST")
    channel = open_channel(endpoint, _Transport, "service.googleapis.com")
    try:
        assert isinstance(channel, grpc.Channel)
    finally:
        channel.close()


def test_the_service_gets_the_transports_tls_channel_on_port_443():
    _Transport.calls.clear()
    assert open_channel(Endpoint(None, False), _Transport, "svc.googleapis.com") == "tls-channel"
    open_channel(Endpoint("eu-svc.googleapis.com:8443", False), _Transport, "svc.googleapis.com")
    assert [c[0] for c in _Transport.calls] == [
        "svc.googleapis.com:443",
        "eu-svc.googleapis.com:8443",
    ]
    assert _Transport.calls[0][1] == list(UNLIMITED_MESSAGES)


def test_channel_target_keeps_an_explicit_port():
    assert channel_target(Endpoint("h:1", True), "d") == "h:1"
    assert channel_target(Endpoint(None, False), "d") == "d:443"
