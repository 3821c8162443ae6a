"""Endpoint resolution, request headers and the client's channels (no call is made)."""

from __future__ import annotations

from typing import Any

import pytest

from pyflink_gcp.bigtable.client import (
    EMULATOR_VARIABLE,
    BigtableClient,
    admin_endpoint,
    data_endpoint,
    request_metadata,
)
from pyflink_gcp.core.endpoints import Endpoint


def test_data_endpoint_explicit_then_variable_then_google(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    assert data_endpoint(None) == Endpoint(None, False)
    assert data_endpoint("bt.example:443") == Endpoint("bt.example:443", False)
    monkeypatch.setenv(EMULATOR_VARIABLE, "localhost:8086")
    assert data_endpoint(None) == Endpoint("localhost:8086", True)
    assert data_endpoint("http://127.0.0.1:9000") == Endpoint("127.0.0.1:9000", True)


def test_admin_endpoint_follows_a_plain_text_data_endpoint_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    # An emulator serves both APIs.
    assert admin_endpoint(None, "http://127.0.0.1:9000") == Endpoint("127.0.0.1:9000", True)
    # Google's data endpoints do not serve the admin API: Google's admin endpoint instead.
    assert admin_endpoint(None, "bt.example:443") == Endpoint(None, False)
    assert admin_endpoint("admin.example:443", "bt.example:443") == Endpoint(
        "admin.example:443", False
    )
    assert admin_endpoint("http://127.0.0.1:1", "http://127.0.0.1:2") == Endpoint(
        "127.0.0.1:1", True
    )
    monkeypatch.setenv(EMULATOR_VARIABLE, "localhost:8086")
    assert admin_endpoint(None, None) == Endpoint("localhost:8086", True)
    assert admin_endpoint(None, "bt.example:443") == Endpoint("localhost:8086", True)


def test_request_metadata_routes_by_table_and_app_profile() -> None:
    table = "projects/p/instances/i/tables/t"
    headers = dict(request_metadata(table, None))
    assert headers["x-goog-request-params"] == f"table_name={table}"
    assert "gl-python/" in headers["x-goog-api-client"]
    with_profile = dict(request_metadata(table, "batch"))
    assert with_profile["x-goog-request-params"] == f"table_name={table}&app_profile_id=batch"


@pytest.mark.parametrize(
    ("table", "profile"),
    [
        ("projects/my-proj/instances/prod.eu/tables/orders_2026-12~x", None),
        ("projects/p/instances/i/tables/t", "batch-jobs_1"),
        ("projects/p/instances/i/tables/t", "a profile&more=1"),  # encoded by api_core
        ("projects/p/instances/i/tables/ünïcode", None),
    ],
)
def test_request_metadata_is_the_routing_header_api_core_builds(
    table: str, profile: str | None
) -> None:
    from google.api_core.gapic_v1 import routing_header

    params = {"table_name": table, **({"app_profile_id": profile} if profile else {})}
    assert request_metadata(table, profile)[1] == routing_header.to_grpc_metadata(params)


def test_plain_text_client_opens_the_admin_channel_on_first_use() -> None:
    client = BigtableClient("unit", "http://127.0.0.1:1")
    try:
        assert client.endpoint == Endpoint("127.0.0.1:1", True)
        assert callable(client.mutate_rows)
        assert client.data._thread.is_alive() and client._channels == []
        admin = client.admin
        assert client.admin is admin
        assert type(admin).__name__ == "BigtableTableAdminClient"
        assert len(client._channels) == 1
    finally:
        client.close()
    assert client._channels == [] and not client.data._thread.is_alive()


def test_no_credentials_is_a_configuration_error_naming_the_endpoint_and_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from pyflink_gcp.core import ConfigurationError
    from pyflink_gcp.core.errors import is_non_retriable

    monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    import threading

    with pytest.raises(ConfigurationError) as err:
        BigtableClient("unit", "bigtable.example.com:443")
    # The data channel's loop thread does not outlive the failed open.
    assert not [t for t in threading.enumerate() if t.name == "pyflink-gcp-bigtable-io-unit"]
    message = str(err.value)
    assert message.startswith(
        "sink 'unit': could not connect the Bigtable data client to bigtable.example.com:443: "
        "DefaultCredentialsError: "
    ), message
    assert message.endswith(
        f"Set {EMULATOR_VARIABLE} to use the emulator, or provide Application Default Credentials."
    ), message
    assert is_non_retriable(err.value)
