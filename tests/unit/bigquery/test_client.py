"""The client room: endpoints from the builder or the emulator variables, the Storage Write
channel, AppendRows connections and the REST client."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials

from pyflink_gcp.bigquery.client import (
    REST_EMULATOR_VARIABLE,
    STORAGE_EMULATOR_VARIABLE,
    AppendConnection,
    AppendRowsRequest,
    PendingAppend,
    ProtoSchema,
    append_rows_stub,
    open_storage_channel,
    resolve_rest_endpoint,
    resolve_storage_endpoint,
    rest_client,
)
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.status import StatusError


def test_endpoints_come_from_the_builder_then_the_emulator_variables_then_adc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STORAGE_EMULATOR_VARIABLE, raising=False)
    monkeypatch.delenv(REST_EMULATOR_VARIABLE, raising=False)
    assert resolve_storage_endpoint(None) == Endpoint(None, False)
    assert resolve_rest_endpoint(None) == Endpoint(None, False)
    monkeypatch.setenv(STORAGE_EMULATOR_VARIABLE, "127.0.0.1:9060")
    monkeypatch.setenv(REST_EMULATOR_VARIABLE, "127.0.0.1:9050")
    assert resolve_storage_endpoint(None) == Endpoint("127.0.0.1:9060", True)
    assert resolve_rest_endpoint(None) == Endpoint("127.0.0.1:9050", True)
    assert resolve_storage_endpoint("http://10.0.0.1:1") == Endpoint("10.0.0.1:1", True)
    assert resolve_rest_endpoint("eu-bigquery.example.com") == Endpoint(
        "eu-bigquery.example.com", False
    )


def test_an_emulator_gets_an_insecure_channel_and_anonymous_rest_credentials() -> None:
    channel = open_storage_channel(Endpoint("127.0.0.1:1", True))
    try:
        assert isinstance(channel, grpc.Channel)
        assert callable(append_rows_stub(channel))
    finally:
        channel.close()
    client = rest_client(Endpoint("127.0.0.1:2", True), "p")
    try:
        assert isinstance(client._credentials, AnonymousCredentials)
        assert client._connection.API_BASE_URL == "http://127.0.0.1:2"
        assert client.project == "p"
    finally:
        client.close()


class _Call:
    def __init__(self, requests: Any, answers: list[Any]) -> None:
        self.requests = requests
        self.answers = iter(answers)
        self.cancelled = False

    def __next__(self) -> Any:
        return next(self.answers)

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_a_connection_names_its_stream_and_an_ended_stream_is_unavailable() -> None:
    calls: list[tuple[_Call, Any]] = []

    def stub(requests: Any, metadata: Any = None, timeout: Any = None) -> _Call:
        call = _Call(requests, ["answer"])
        calls.append((call, metadata))
        return call

    connection = AppendConnection(stub, "projects/p/datasets/d/tables/t/streams/_default", 5.0)
    call, metadata = calls[0]
    assert metadata == (
        ("x-goog-request-params", "write_stream=projects/p/datasets/d/tables/t/streams/_default"),
    )
    connection.send(PendingAppend("s", ProtoSchema(), rows=[b"\x08\x01"]))
    built = next(call.requests)  # built as gRPC takes it
    assert isinstance(built, AppendRowsRequest)
    assert built.write_stream == "s"
    assert list(built.proto_rows.rows.serialized_rows) == [b"\x08\x01"]
    assert connection.receive() == "answer"
    with pytest.raises(StatusError, match="ended without a response") as err:
        connection.receive()
    assert err.value.grpc_status_code is grpc.StatusCode.UNAVAILABLE
    connection.close()
    assert call.cancelled
    assert list(call.requests) == []  # the request stream ends


def test_the_rest_session_reads_the_proxy_and_ca_settings_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A session that trusts the environment reads it on every request; the client's reads it
    # for its endpoint when the client is made, with the same outcome.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/bundle.pem")
    proxied = rest_client(Endpoint("bigquery.example:9050", True), "p")
    bypassed = rest_client(Endpoint("127.0.0.1:9050", True), "p")
    try:
        session = proxied._http
        assert not session.trust_env
        assert session.proxies["https"] == session.proxies["http"] == "http://proxy.example:3128"
        assert session.verify == "/etc/ssl/bundle.pem"
        # NO_PROXY names the endpoint: no proxy, as requests would decide per request.
        assert not bypassed._http.trust_env and bypassed._http.proxies == {}
        # Later changes of the environment no longer reach a request's settings.
        monkeypatch.setenv("HTTPS_PROXY", "http://other.example:1")
        settings = session.merge_environment_settings(
            "http://bigquery.example:9050/bigquery/v2/x", {}, None, None, None
        )
        assert settings["proxies"]["http"] == "http://proxy.example:3128"
    finally:
        proxied.close()
        bypassed.close()


def test_a_pending_append_builds_protobuf_rows_with_their_writer_schema() -> None:
    schema = ProtoSchema()
    schema.proto_descriptor.name = "row"
    rows = [b"\x08\x01", b"\x08\x02"]
    built = PendingAppend("stream-a", schema, rows=rows, missing=2, offset=7).build()
    assert built.write_stream == "stream-a"
    assert built.proto_rows.writer_schema == schema
    assert list(built.proto_rows.rows.serialized_rows) == rows
    assert built.default_missing_value_interpretation == 2
    assert built.HasField("offset") and built.offset.value == 7
    assert not built.HasField("arrow_rows")


def test_a_pending_append_builds_an_arrow_batch_and_leaves_unset_parts_unset() -> None:
    built = PendingAppend("stream-b", b"arrow-schema", arrow=b"record-batch").build()
    assert built.arrow_rows.writer_schema.serialized_schema == b"arrow-schema"
    assert built.arrow_rows.rows.serialized_record_batch == b"record-batch"
    assert not built.HasField("proto_rows")
    assert not built.HasField("offset")
    assert built.default_missing_value_interpretation == 0


def test_a_pending_append_builds_a_new_message_each_time() -> None:
    """A request sent again after a broken connection is built again from the same parts."""
    pending = PendingAppend("s", ProtoSchema(), rows=[b"\x08\x01"])
    first, second = pending.build(), pending.build()
    assert first is not second and first == second
