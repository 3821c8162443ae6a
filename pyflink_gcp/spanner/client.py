"""The gRPC plumbing of the Spanner sink: the emulator variable, the endpoint, the client.

The sink calls the generated GAPIC ``SpannerClient`` (sessions, schema queries, commits) on a
channel opened by :func:`~pyflink_gcp.core.channels.open_channel`, not the high-level
``google.cloud.spanner.Client``: it needs its own session handling, retries and request
building (the high-level client builds a proto-plus object per row), and ``Database.batch()``
adds nothing a blind write needs. Commit requests are built as raw protobufs
(:data:`CommitRequestPb`) and wrapped once per commit.
"""

from __future__ import annotations

from typing import Any

from google.api_core.gapic_v1.client_info import ClientInfo
from google.auth.exceptions import DefaultCredentialsError
from google.cloud.spanner_v1.services.spanner import SpannerClient
from google.cloud.spanner_v1.services.spanner.transports.grpc import SpannerGrpcTransport
from google.cloud.spanner_v1.types import CommitRequest

from pyflink_gcp._version import __version__
from pyflink_gcp.core.channels import open_channel
from pyflink_gcp.core.endpoints import resolve_endpoint
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.spanner.destinations import DatabaseDestination

#: The standard variable naming a Spanner emulator (``host:port``, plain text, no credentials).
EMULATOR_VARIABLE = "SPANNER_EMULATOR_HOST"

#: Spanner's endpoint when neither the builder nor the environment names one.
DEFAULT_HOST = "spanner.googleapis.com"

#: The raw protobuf class of a commit request (proto-plus wrappers cost microseconds per row).
CommitRequestPb: Any = CommitRequest.pb()


def open_client(endpoint: str | None, sink_name: str) -> SpannerClient:
    """A GAPIC client of Spanner, or of the emulator the environment names.

    Args:
        endpoint: The builder's ``set_endpoint`` value, if any.
        sink_name: For the error.

    Raises:
        ConfigurationError: No emulator and no Application Default Credentials on this worker.
    """
    resolved = resolve_endpoint(endpoint, EMULATOR_VARIABLE)
    try:
        channel = open_channel(resolved, SpannerGrpcTransport, DEFAULT_HOST)
    except DefaultCredentialsError as exc:
        raise ConfigurationError(
            f"sink '{sink_name}': no Application Default Credentials for Spanner on this worker "
            f"(set {EMULATOR_VARIABLE} to use an emulator, or configure ADC): {exc}"
        ) from exc
    return SpannerClient(
        transport=SpannerGrpcTransport(channel=channel),
        client_info=ClientInfo(user_agent=f"pyflink-gcp/{__version__}"),
    )


def call_metadata(database: DatabaseDestination) -> list[tuple[str, str]]:
    """The request metadata of every call on ``database``: its resource prefix, and routing to
    the leader (commits, and the session they use, are read-write)."""
    return [
        ("google-cloud-resource-prefix", str(database)),
        ("x-goog-spanner-route-to-leader", "true"),
    ]


def wrap_commit(request: Any) -> CommitRequest:
    """The proto-plus ``CommitRequest`` the GAPIC client takes, around a raw one (no copy)."""
    return CommitRequest.wrap(request)
