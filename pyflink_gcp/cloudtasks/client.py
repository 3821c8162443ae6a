"""The Cloud Tasks client room: endpoint, channels, the raw ``CreateTask`` call and its metadata.

The hot path sends ``CreateTask`` as raw bytes on a ``grpc.aio`` channel driven by an
event-loop thread (:class:`AsyncChannel`, on :mod:`pyflink_gcp.core.aio`), behind the
synchronous ``future()`` face of a ``grpc.Channel``. Why ``grpc.aio`` on a loop thread: the API
creates one task per call, so on a machine whose cores the job shares, client CPU per call bounds
the sink. With raw protobuf requests and hundreds of calls in flight, a ``grpc.aio`` call costs
less client CPU than the synchronous channel's ``future()``, and a fraction of what the generated
client costs in a thread pool (proto-plus wrapping, one thread per call); several synchronous
channels cost more than one (each adds a polling thread). ``bench/README.md`` (Cloud Tasks) has
the figures. The processing thread only appends encoded requests to the loop's inbox, waking it
once per batch.

The queue check's ``GetQueue`` is a raw call too, on a synchronous channel of its own
(:func:`get_queue_stub`): its first attempt is a ``grpc.Future`` no Python thread waits on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.api_core.gapic_v1 import client_info as gapic_client_info
from google.api_core.gapic_v1 import routing_header
from google.cloud import tasks_v2
from google.cloud.tasks_v2 import gapic_version
from google.cloud.tasks_v2.services.cloud_tasks.transports import (
    CloudTasksGrpcAsyncIOTransport,
    CloudTasksGrpcTransport,
)

from pyflink_gcp._version import __version__
from pyflink_gcp.core.aio import AsyncChannel
from pyflink_gcp.core.channels import UNLIMITED_MESSAGES, open_channel
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint

#: The emulator variable (no gcloud standard exists for Cloud Tasks): ``host:port``, insecure.
EMULATOR_VARIABLE = "CLOUD_TASKS_EMULATOR_HOST"
DEFAULT_HOST = "cloudtasks.googleapis.com"
#: The full method name of ``CreateTask``, called with encoded request bytes.
CREATE_TASK = "/google.cloud.tasks.v2.CloudTasks/CreateTask"
#: The full method name of ``GetQueue`` (the queue check).
GET_QUEUE = "/google.cloud.tasks.v2.CloudTasks/GetQueue"

_CreateTaskRequestPb: Any = tasks_v2.CreateTaskRequest.pb()
_GetQueueRequestPb: Any = tasks_v2.GetQueueRequest.pb()
_QueuePb: Any = tasks_v2.Queue.pb()
# Field 2 of CreateTaskRequest (``task``), length-delimited: its tag byte.
_TASK_FIELD_TAG = b"\x12"

#: ``(request bytes, timeout=..., metadata=...) -> handle``: starts one ``CreateTask`` call.
StartCall = Callable[..., Any]


def resolve_cloudtasks_endpoint(explicit: str | None) -> Endpoint:
    """The builder's endpoint, else ``CLOUD_TASKS_EMULATOR_HOST``, else the service (ADC)."""
    return resolve_endpoint(explicit, EMULATOR_VARIABLE)


def channel_options(count: int) -> tuple[tuple[str, Any], ...]:
    """gRPC options of ``count`` channels: no message size limit, and separate connections."""
    if count > 1:
        # Without a local pool, channels with equal arguments share one connection.
        return (*UNLIMITED_MESSAGES, ("grpc.use_local_subchannel_pool", 1))
    return UNLIMITED_MESSAGES


def open_admin_channel(endpoint: Endpoint) -> grpc.Channel:
    """A synchronous channel for the queue check (plain text for an emulator, else TLS)."""
    return open_channel(endpoint, CloudTasksGrpcTransport, DEFAULT_HOST)


def get_queue_stub(channel: grpc.Channel) -> Any:
    """``GetQueue`` as a raw call on ``channel``: called with a ``GetQueueRequest`` message, it
    answers a ``Queue`` message (``stub(request, ...)`` blocks, ``stub.future(request, ...)``
    does not) and fails with a ``grpc.RpcError``. The generated client's layers would cost
    CPU per call, and a job naming thousands of queues makes thousands of checks."""
    return channel.unary_unary(
        GET_QUEUE,
        request_serializer=_GetQueueRequestPb.SerializeToString,
        response_deserializer=_QueuePb.FromString,
    )


def get_queue_request(name: str) -> Any:
    """The ``GetQueueRequest`` message of a queue's resource name."""
    return _GetQueueRequestPb(name=name)


def get_queue_metadata(name: str, header: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """Request metadata of a queue's ``GetQueue``: the routing header and the client's identity."""
    return (routing_header.to_grpc_metadata((("name", name),)), header)


def open_async_channels(endpoint: Endpoint, count: int) -> list[AsyncChannel]:
    """``count`` :class:`~pyflink_gcp.core.aio.AsyncChannel` s to the endpoint (the hot path's
    transport; :func:`create_task_caller` binds ``CreateTask`` on them)."""
    options = channel_options(count)
    return [
        AsyncChannel(
            endpoint,
            CloudTasksGrpcAsyncIOTransport,
            DEFAULT_HOST,
            options,
        )
        for _ in range(count)
    ]


def create_task_caller(channels: Sequence[Any]) -> StartCall:
    """The function that starts one raw ``CreateTask`` call, spread round-robin over
    ``channels`` (anything with a ``grpc.Channel``'s ``unary_unary(...).future``)."""
    callables = [
        channel.unary_unary(
            CREATE_TASK,
            request_serializer=None,  # requests are encoded bytes already
            response_deserializer=None,  # the created task is not needed
        ).future
        for channel in channels
    ]
    if len(callables) == 1:
        return callables[0]  # type: ignore[no-any-return]
    spread = itertools.cycle(callables)
    return lambda *args, **kwargs: next(spread)(*args, **kwargs)


def client_header() -> tuple[str, str]:
    """The ``x-goog-api-client`` metadata the generated client would send."""
    header: tuple[str, str] = gapic_client_info.ClientInfo(
        gapic_version=gapic_version.__version__, user_agent=f"pyflink-gcp/{__version__}"
    ).to_grpc_metadata()
    return header


def queue_metadata(queue: str, header: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """Request metadata of a queue's calls: the routing header and the client's identity."""
    return (routing_header.to_grpc_metadata((("parent", queue),)), header)


def request_head(queue: str) -> bytes:
    """The encoded ``parent`` field of a queue's ``CreateTaskRequest`` and the ``task`` tag.

    A request is this head, the task's length (:func:`varint`) and the task's bytes: encoding
    the parent once per queue spares a request message (a copy of the task) and a second walk
    of the task to size it.
    """
    head: bytes = _CreateTaskRequestPb(parent=queue).SerializeToString()
    return head + _TASK_FIELD_TAG


def varint(value: int) -> bytes:
    """The protobuf base-128 encoding of a non-negative int (a length prefix)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
