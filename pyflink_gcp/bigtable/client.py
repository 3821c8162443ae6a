"""The gRPC plumbing of the Bigtable sink: endpoints, the MutateRows stub, the table admin client.

Why a raw stub rather than the generated ``BigtableClient``: its per-call layers (proto-plus
conversion, retry and timeout wrappers) cost CPU on every MutateRows, which matters when many
tables each send small requests at every flush. The stub is a ``grpc.aio`` unary-stream call on
an :class:`~pyflink_gcp.core.aio.AsyncChannel`, whose event-loop thread runs every MutateRows of
the subtask, retries and backoff included, so no thread waits on a request. The channels are
still built by the generated transports (TLS, Application Default Credentials with the Bigtable
scopes), through :mod:`~pyflink_gcp.core.channels`.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from typing import Any

import grpc
from google.cloud.bigtable_v2.types import bigtable as _bigtable_types

from pyflink_gcp.core.aio import AsyncChannel
from pyflink_gcp.core.channels import UNLIMITED_MESSAGES, open_channel
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint
from pyflink_gcp.core.errors import ConfigurationError

_LOG = logging.getLogger("pyflink_gcp.bigtable")

#: The emulator variable: ``host:port`` of a plain-text Bigtable emulator (data and admin).
EMULATOR_VARIABLE = "BIGTABLE_EMULATOR_HOST"

#: The raw protobuf classes of MutateRows (proto-plus wrappers cost microseconds per entry).
MutateRowsRequestPb: Any = _bigtable_types.MutateRowsRequest.pb()
MutateRowsResponsePb: Any = _bigtable_types.MutateRowsResponse.pb()
MutateRowsEntryPb: Any = _bigtable_types.MutateRowsRequest.Entry.pb()

MUTATE_ROWS_METHOD = "/google.bigtable.v2.Bigtable/MutateRows"

#: Google's data and admin hosts, named by errors when no endpoint is given.
_DATA_HOST = "bigtable.googleapis.com"
_ADMIN_HOST = "bigtableadmin.googleapis.com"


@functools.cache
def _client_info_header() -> tuple[str, str]:
    """The client-identification header, the same for every table: built once, shared by the
    headers of thousands of tables."""
    from google.cloud.bigtable_v2.services.bigtable.transports.base import DEFAULT_CLIENT_INFO

    key, value = DEFAULT_CLIENT_INFO.to_grpc_metadata()
    return (sys.intern(key), value)


#: What api_core's routing header leaves as it is (``urlencode(..., safe="/")``): table ids and
#: the rest of a table's resource name never hold anything else.
_NOT_ENCODED = re.compile(r"[A-Za-z0-9_.~/-]*")


def request_metadata(table_name: str, app_profile_id: str | None) -> tuple[tuple[str, str], ...]:
    """The headers the generated client would send: client identification and the routing
    parameters Bigtable uses to route the request to the table's backends.

    Built once per table and subtask, so at thousands of tables api_core's URL encoding was a
    few percent of the sink's CPU; a name with nothing to encode skips it (same header).
    """
    params = {"table_name": table_name}
    if app_profile_id:
        params["app_profile_id"] = app_profile_id
    if all(_NOT_ENCODED.fullmatch(value) for value in params.values()):
        routing = ("x-goog-request-params", "&".join(f"{k}={v}" for k, v in params.items()))
    else:
        from google.api_core.gapic_v1 import routing_header

        routing = routing_header.to_grpc_metadata(params)
    return (_client_info_header(), routing)


def data_endpoint(explicit: str | None) -> Endpoint:
    """Where data calls go: the builder's ``set_endpoint``, else the emulator variable, else
    Google's endpoint."""
    return resolve_endpoint(explicit, EMULATOR_VARIABLE)


def admin_endpoint(explicit_admin: str | None, explicit_data: str | None) -> Endpoint:
    """Where table admin calls go: the builder's ``set_admin_endpoint``, else a plain-text data
    endpoint (an emulator serves both APIs), else the emulator variable or Google's admin
    endpoint (Google's data endpoints do not serve the admin API)."""
    if explicit_admin is None and explicit_data is not None:
        data = data_endpoint(explicit_data)
        if data.insecure:
            return data
    return resolve_endpoint(explicit_admin, EMULATOR_VARIABLE)


class BigtableClient:
    """The connections of one sink subtask: the MutateRows stub on the data channel, opened at
    once, and the table admin client, opened on the first admin call.

    Attributes:
        data: The data channel and its event-loop thread; its ``start`` runs a MutateRows
            operation there.
        mutate_rows: ``(request_pb, timeout=, metadata=) -> async iterator of response_pb``,
            called only by coroutines on ``data``'s loop.
    """

    def __init__(
        self, sink_name: str, endpoint: str | None = None, admin_endpoint: str | None = None
    ) -> None:
        from google.cloud.bigtable_v2.services.bigtable.transports import (
            BigtableGrpcAsyncIOTransport,
        )

        self._sink = sink_name
        self._admin_explicit = admin_endpoint
        self._data_explicit = endpoint
        self.endpoint = data_endpoint(endpoint)
        self._admin: Any = None
        self._admin_channel: grpc.Channel | None = None
        self._channels: list[grpc.Channel] = []
        self.data = self._open_data(BigtableGrpcAsyncIOTransport)
        self.mutate_rows: Any = self.data.unary_stream(
            MUTATE_ROWS_METHOD,
            request_serializer=MutateRowsRequestPb.SerializeToString,
            response_deserializer=MutateRowsResponsePb.FromString,
        )

    @property
    def endpoint_name(self) -> str:
        """``host:port`` of the data channel, named by errors."""
        return self.endpoint.host or f"{_DATA_HOST}:443"

    @property
    def admin_endpoint_name(self) -> str:
        """``host:port`` the admin client connects to, named by errors."""
        endpoint = admin_endpoint(self._admin_explicit, self._data_explicit)
        return endpoint.host or f"{_ADMIN_HOST}:443"

    @property
    def admin(self) -> Any:
        """The generated ``BigtableTableAdminClient`` (opened on first use: a sink that writes
        to known tables may lack admin permissions and never needs it)."""
        if self._admin is None:
            from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
            from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
                BigtableTableAdminGrpcTransport as Transport,
            )

            self._admin = BigtableTableAdminClient(
                transport=Transport(channel=self._admin_channel_opened())
            )
        return self._admin

    def _admin_channel_opened(self) -> grpc.Channel:
        if self._admin_channel is None:
            from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
                BigtableTableAdminGrpcTransport as Transport,
            )

            endpoint = admin_endpoint(self._admin_explicit, self._data_explicit)
            self._admin_channel = self._open("admin", endpoint, Transport, Transport.DEFAULT_HOST)
        return self._admin_channel

    def close(self) -> None:
        """Close every channel and stop the data channel's loop thread (calls in flight fail,
        operations in flight end CANCELLED)."""
        try:
            self.data.close()
        except Exception:  # noqa: BLE001 - teardown continues
            _LOG.debug("%s: closing the data channel failed", self._sink, exc_info=True)
        self._admin = None
        self._admin_channel = None
        for channel in self._channels:
            try:
                channel.close()
            except Exception:  # noqa: BLE001 - teardown continues
                _LOG.debug("%s: closing a channel failed", self._sink, exc_info=True)
        self._channels = []

    def _open_data(self, transport: Any) -> AsyncChannel:
        try:
            return AsyncChannel(
                self.endpoint,
                transport,
                transport.DEFAULT_HOST,
                UNLIMITED_MESSAGES,
            )
        except Exception as exc:
            raise self._not_connected("data", self.endpoint, transport.DEFAULT_HOST, exc) from exc

    def _open(
        self, kind: str, endpoint: Endpoint, transport: Any, default_host: str
    ) -> grpc.Channel:
        try:
            channel = open_channel(endpoint, transport, default_host, UNLIMITED_MESSAGES)
        except Exception as exc:
            raise self._not_connected(kind, endpoint, default_host, exc) from exc
        self._channels.append(channel)
        return channel

    def _not_connected(
        self, kind: str, endpoint: Endpoint, default_host: str, exc: Exception
    ) -> ConfigurationError:
        return ConfigurationError(
            f"sink '{self._sink}': could not connect the Bigtable {kind} client to "
            f"{endpoint.host or default_host}: {type(exc).__name__}: {exc}. Set "
            f"{EMULATOR_VARIABLE} to use the emulator, or provide Application Default "
            "Credentials."
        )
