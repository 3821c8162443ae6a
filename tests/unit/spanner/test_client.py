"""The Spanner client layer: the emulator variable, the channel, and a missing ADC."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1.services.spanner import SpannerClient

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.spanner.client import (
    EMULATOR_VARIABLE,
    call_metadata,
    open_client,
    wrap_commit,
)
from tests.unit.spanner.fakes import DB


def test_the_emulator_variable_gives_a_plain_text_client(monkeypatch: Any) -> None:
    assert EMULATOR_VARIABLE == "SPANNER_EMULATOR_HOST"
    opened: list[str] = []
    real = grpc.insecure_channel

    def insecure(target: str, options: Any = None) -> Any:
        opened.append(target)
        return real(target, options=options)

    monkeypatch.setattr(grpc, "insecure_channel", insecure)
    monkeypatch.setenv(EMULATOR_VARIABLE, "localhost:9999")
    client = open_client(None, "unit")
    assert isinstance(client, SpannerClient) and opened == ["localhost:9999"]
    client.transport.close()
    # An explicit http:// endpoint wins over the variable.
    client = open_client("http://127.0.0.1:9010", "unit")
    assert opened == ["localhost:9999", "127.0.0.1:9010"]
    client.transport.close()


def test_no_credentials_is_a_configuration_error(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigurationError, match="sink 'unit': no Application Default"):
        open_client("spanner.example.com:443", "unit")


def test_every_call_names_the_database_and_routes_to_the_leader() -> None:
    assert call_metadata(DB) == [
        ("google-cloud-resource-prefix", str(DB)),
        ("x-goog-spanner-route-to-leader", "true"),
    ]


def test_a_raw_request_is_wrapped_without_a_copy() -> None:
    from pyflink_gcp.spanner.client import CommitRequestPb

    raw = CommitRequestPb(session="s")
    wrapped = wrap_commit(raw)
    raw.session = "t"
    assert wrapped.session == "t"
