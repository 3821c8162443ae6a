"""Opening gRPC channels: plain text to an emulator, TLS with credentials to the service.

Every service's client layer opens its channels here, so the rule is written once: an endpoint
from an emulator variable or an ``http://`` URL gets an insecure channel (the emulators take no
credentials), anything else a TLS channel built by the generated transport's own
``create_channel``, which applies Application Default Credentials with the service's scopes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from pyflink_gcp.core.endpoints import Endpoint

#: No message size limit in either direction: the sinks bound their own requests by the
#: services' limits, which are above gRPC's 4 MB default.
UNLIMITED_MESSAGES: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)


def channel_target(endpoint: Endpoint, default_host: str) -> str:
    """``host:port`` to dial: the endpoint's host, else the service's default, on port 443
    when none is given."""
    host = endpoint.host or default_host
    return host if ":" in host else f"{host}:443"


def open_channel(
    endpoint: Endpoint,
    transport: Any,
    default_host: str,
    options: Sequence[tuple[str, Any]] = UNLIMITED_MESSAGES,
) -> grpc.Channel:
    """A synchronous channel to ``endpoint``.

    Args:
        endpoint: Where to connect (see :func:`~pyflink_gcp.core.endpoints.resolve_endpoint`).
        transport: The generated gRPC transport class of the service (for example
            ``PublisherGrpcTransport``); its ``create_channel`` builds the TLS channel with the
            service's credentials and scopes.
        default_host: The service's host when the endpoint names none.
        options: gRPC channel options.
    """
    if endpoint.insecure:
        assert endpoint.host is not None
        return grpc.insecure_channel(endpoint.host, options=list(options))
    channel: grpc.Channel = transport.create_channel(
        channel_target(endpoint, default_host), options=list(options)
    )
    return channel


def open_aio_channel(
    endpoint: Endpoint,
    transport: Any,
    default_host: str,
    options: Sequence[tuple[str, Any]] = UNLIMITED_MESSAGES,
    interceptors: Sequence[Any] = (),
) -> Any:
    """An asyncio channel to ``endpoint``; ``transport`` is the generated AsyncIO transport.
    ``interceptors``: ``grpc.aio`` client interceptors of every call on it."""
    extra: dict[str, Any] = {"interceptors": list(interceptors)} if interceptors else {}
    if endpoint.insecure:
        assert endpoint.host is not None
        return grpc.aio.insecure_channel(endpoint.host, options=list(options), **extra)
    return transport.create_channel(
        channel_target(endpoint, default_host), options=list(options), **extra
    )
