"""The BigQuery sink's clients: where they connect, the Storage Write channel and its
AppendRows connections, and the REST client used for table metadata and creation.

BigQuery has no standard emulator variable; the sink honours ``BIGQUERY_EMULATOR_HOST`` (REST)
and ``BIGQUERY_STORAGE_EMULATOR_HOST`` (Storage Write gRPC), both ``host:port`` of a plain-text
server with anonymous credentials, like the gcloud emulators' variables.

AppendRows is called on the raw channel rather than through ``BigQueryWriteClient``: requests
are built as raw protobuf messages (proto-plus wrappers cost far more CPU per request), and
every request names its stream, which the client's ``AppendRowsStream`` helper sends only on
the first one (the emulator then answers ``Stream not found``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.core.aio import AsyncChannel
from pyflink_gcp.core.channels import UNLIMITED_MESSAGES, open_aio_channel, open_channel
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint
from pyflink_gcp.core.status import StatusError

REST_EMULATOR_VARIABLE = "BIGQUERY_EMULATOR_HOST"
STORAGE_EMULATOR_VARIABLE = "BIGQUERY_STORAGE_EMULATOR_HOST"
DEFAULT_STORAGE_HOST = "bigquerystorage.googleapis.com:443"
DEFAULT_REST_URL = "https://bigquery.googleapis.com"
APPEND_ROWS_METHOD = "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows"

# Raw protobuf classes: building requests through proto-plus wrappers costs far more.
AppendRowsRequest = storage_types.AppendRowsRequest.pb()
AppendRowsResponse = storage_types.AppendRowsResponse.pb()
ProtoSchema = storage_types.ProtoSchema.pb()


class PendingAppend:
    """One AppendRows request as its parts; the message is built only as it goes on the wire.

    A subtask flushing 10,000 tables hands its connections 10,000 requests at once. Built at
    once, each message (its stream name, its copy of the writer schema, its rows) stayed alive
    until the connection wrote it, and once freed the messages left holes in the heap between
    the table writers that outlive them, which the worker kept: ``python
    bench/bigquery_memory.py --tables 10000 --rows 2`` grew by 65 MB with the messages built by
    the sender, 55 MB with them built here (bench/README.md). The parts are references to what
    the sender holds anyway: the batch's rows, the layout's shared writer schema.

    Attributes:
        stream: The write stream the request names.
        rows: Serialized protobuf rows, or None for an Arrow request.
        arrow: A serialized Arrow record batch, or None for protobuf rows.
        schema: The writer schema: a ``ProtoSchema`` for protobuf rows, the serialized Arrow
            schema for an Arrow batch.
        missing: ``default_missing_value_interpretation`` (0: unset).
        offset: The request's offset (BUFFERED streams), or None.
    """

    __slots__ = ("stream", "rows", "arrow", "schema", "missing", "offset")

    def __init__(
        self,
        stream: str,
        schema: Any,
        *,
        rows: Sequence[bytes] | None = None,
        arrow: bytes | None = None,
        missing: int = 0,
        offset: int | None = None,
    ) -> None:
        self.stream = stream
        self.schema = schema
        self.rows = rows
        self.arrow = arrow
        self.missing = missing
        self.offset = offset

    def build(self) -> Any:
        """The ``AppendRowsRequest`` message (a new one at every call)."""
        request = AppendRowsRequest()
        request.write_stream = self.stream
        if self.missing:
            request.default_missing_value_interpretation = self.missing
        if self.offset is not None:
            request.offset.value = self.offset
        if self.arrow is not None:
            arrow_rows = request.arrow_rows
            arrow_rows.writer_schema.serialized_schema = self.schema
            arrow_rows.rows.serialized_record_batch = self.arrow
        else:
            request.proto_rows.writer_schema.CopyFrom(self.schema)
            request.proto_rows.rows.serialized_rows.extend(self.rows or ())
        return request


def resolve_storage_endpoint(explicit: str | None) -> Endpoint:
    """The builder's Storage Write endpoint, else ``BIGQUERY_STORAGE_EMULATOR_HOST``, else ADC."""
    return resolve_endpoint(explicit, STORAGE_EMULATOR_VARIABLE)


def resolve_rest_endpoint(explicit: str | None) -> Endpoint:
    """The builder's REST endpoint, else ``BIGQUERY_EMULATOR_HOST``, else the service (ADC)."""
    return resolve_endpoint(explicit, REST_EMULATOR_VARIABLE)


def open_storage_channel(endpoint: Endpoint) -> grpc.Channel:
    """A channel to the Storage Write API: insecure to an emulator, TLS with ADC otherwise."""
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    return open_channel(
        endpoint, BigQueryWriteGrpcTransport, DEFAULT_STORAGE_HOST, UNLIMITED_MESSAGES
    )


def open_lookup_channel(endpoint: Endpoint) -> AsyncChannel:
    """A ``grpc.aio`` channel to the Storage Write API on the process's event-loop thread, for
    the tables' ``GetWriteStream`` lookups.

    A lookup is a unary call per table and subtask. As a future of a synchronous channel it
    completes on gRPC's polling thread, which must take the GIL from a processing thread busy
    with records: beside a busy Python thread such a call costs four times the client CPU of
    the same call on an event loop (``python bench/grpc_floor.py --busy``, bench/README.md).
    """
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcAsyncIOTransport,
    )

    return AsyncChannel(
        endpoint,
        BigQueryWriteGrpcAsyncIOTransport,
        DEFAULT_STORAGE_HOST,
        UNLIMITED_MESSAGES,
    )


def open_append_channel(endpoint: Endpoint, interceptors: Sequence[Any] = ()) -> Any:
    """A ``grpc.aio`` channel to the Storage Write API with a TCP connection of its own, for
    one of the shared AppendRows connections (:mod:`pyflink_gcp.bigquery.connections`); to be
    called on the event loop that will use it. ``interceptors``: those of them that are
    ``grpc.aio`` client interceptors apply to its calls."""
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcAsyncIOTransport,
    )

    return open_aio_channel(
        endpoint,
        BigQueryWriteGrpcAsyncIOTransport,
        DEFAULT_STORAGE_HOST,
        (*UNLIMITED_MESSAGES, ("grpc.use_local_subchannel_pool", 1)),
        [i for i in interceptors if isinstance(i, grpc.aio.ClientInterceptor)],
    )


def append_rows_stub(channel: grpc.Channel, interceptors: Sequence[Any] = ()) -> Any:
    """The AppendRows bidi-streaming callable of ``channel`` (through those of
    ``interceptors`` that are synchronous client interceptors), taking and returning raw
    protobuf messages."""
    interceptors = [i for i in interceptors if not isinstance(i, grpc.aio.ClientInterceptor)]
    if interceptors:
        channel = grpc.intercept_channel(channel, *interceptors)
    return channel.stream_stream(
        APPEND_ROWS_METHOD,
        request_serializer=AppendRowsRequest.SerializeToString,
        response_deserializer=AppendRowsResponse.FromString,
    )


def rest_client(endpoint: Endpoint, project: str) -> Any:
    """A ``google.cloud.bigquery.Client`` for ``endpoint``: anonymous to an emulator, ADC
    otherwise, its HTTP session's environment settings read once (:func:`read_environment`)."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import bigquery

    if endpoint.insecure:
        from google.auth.credentials import AnonymousCredentials

        client = bigquery.Client(
            project=project,
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=endpoint.http_url),
        )
    elif endpoint.host is not None:
        client = bigquery.Client(
            project=project, client_options=ClientOptions(api_endpoint=endpoint.http_url)
        )
    else:
        client = bigquery.Client(project=project)
    read_environment(client._http, endpoint.http_url if endpoint.host else DEFAULT_REST_URL)
    return client


def read_environment(session: Any, url: str) -> None:
    """Read the environment's proxy and CA bundle settings for ``url`` into ``session`` once.

    A ``requests`` session that trusts the environment reads it again on every request (the
    proxy variables, ``no_proxy``, ``.netrc``, the CA bundle variables), which costs more CPU
    than the rest of a table lookup. The calls of one client all go to one endpoint, so the
    settings read for it here are the ones every request would have read (``.netrc`` aside:
    the credentials authorize the calls).
    """
    import os

    from requests.utils import get_environ_proxies

    if not session.trust_env:
        return
    for scheme, proxy in get_environ_proxies(url).items():
        session.proxies.setdefault(scheme, proxy)
    if session.verify is True:
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            session.verify = bundle
    session.trust_env = False


def _requests(pending: queue.SimpleQueue[PendingAppend | None]) -> Iterator[Any]:
    while True:
        request = pending.get()
        if request is None:
            return
        yield request.build()


class AppendConnection:
    """One AppendRows bidi stream: requests go in through a queue, responses come back in order.

    With ``on_answer``, a reader thread of the connection hands each response to it, and the
    stream's end (an error, or UNAVAILABLE when it ended without answering) once; otherwise one
    thread at a time reads them with :meth:`receive`. :meth:`close` may come from any thread. A
    BUFFERED stream's sender (and every sender with ``channel_count`` None) has one of its own
    while it has requests in flight; default-stream senders otherwise share the connections of
    :mod:`pyflink_gcp.bigquery.connections`.
    """

    __slots__ = ("_pending", "_call")

    #: A connection of its own never retires (a shared one does, see ``connections``).
    retiring = False

    def __init__(
        self,
        stub: Any,
        stream: str,
        timeout_s: float,
        on_answer: Callable[[Any], None] | None = None,
    ) -> None:
        self._pending: queue.SimpleQueue[PendingAppend | None] = queue.SimpleQueue()
        # The routing header lets the service find the stream before the first request.
        self._call = stub(
            _requests(self._pending),
            metadata=(("x-goog-request-params", f"write_stream={stream}"),),
            timeout=timeout_s,
        )
        if on_answer is not None:
            threading.Thread(
                target=self._read, args=(on_answer,), name="append-rows-reader", daemon=True
            ).start()

    def send(self, request: PendingAppend) -> None:
        """Queue ``request`` for the stream (gRPC takes it from the queue and builds it)."""
        self._pending.put(request)

    def receive(self) -> Any:
        """The next response, in the order the requests were sent.

        Raises:
            grpc.RpcError: The stream failed.
            StatusError: UNAVAILABLE, when the stream ended without answering.
        """
        try:
            return next(self._call)
        except StopIteration:
            raise StatusError(
                grpc.StatusCode.UNAVAILABLE, "the AppendRows stream ended without a response"
            ) from None

    def _read(self, on_answer: Callable[[Any], None]) -> None:
        while True:
            try:
                response = self.receive()
            except Exception as exc:  # noqa: BLE001 - the owner decides what it means
                on_answer(exc)
                return
            on_answer(response)

    def close(self) -> None:
        """End the request stream and cancel the call."""
        self._pending.put(None)
        self._call.cancel()

    abort = close
