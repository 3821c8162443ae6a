"""Test helpers for the Bigtable sink: admin and read-back clients, and a checking proxy.

The emulator does not enforce Bigtable's 100,000-mutations-per-request limit and never answers
a transient status, so :class:`BigtableProxy` sits between the sink and the emulator: it
rejects oversized MutateRows requests like the service does (INVALID_ARGUMENT), records the
size of every request, and can inject per-entry or whole-RPC failures.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.cloud.bigtable_v2.types import bigtable as bigtable_types

PROJECT = "test-project"
MUTATE_ROWS = "/google.bigtable.v2.Bigtable/MutateRows"
READ_ROWS = "/google.bigtable.v2.Bigtable/ReadRows"
_RequestPb = bigtable_types.MutateRowsRequest.pb()
_ResponsePb = bigtable_types.MutateRowsResponse.pb()
_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def unique(prefix: str) -> str:
    """A fresh id (instances and tables are never reused between tests)."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def emulator_host() -> str:
    return os.environ["BIGTABLE_EMULATOR_HOST"]


def _channel(host: str | None = None) -> grpc.Channel:
    return grpc.insecure_channel(host or emulator_host(), options=_OPTIONS)


def admin_client(host: str | None = None) -> Any:
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
    from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
        BigtableTableAdminGrpcTransport,
    )

    return BigtableTableAdminClient(
        transport=BigtableTableAdminGrpcTransport(channel=_channel(host))
    )


def create_table(instance: str, table: str, families: dict[str, int | None]) -> None:
    from google.cloud.bigtable_admin_v2.types import table as admin_table

    admin_client().create_table(
        request={
            "parent": f"projects/{PROJECT}/instances/{instance}",
            "table_id": table,
            "table": admin_table.Table(
                column_families={
                    name: admin_table.ColumnFamily(
                        gc_rule=admin_table.GcRule(max_num_versions=v)
                        if v
                        else admin_table.GcRule()
                    )
                    for name, v in families.items()
                }
            ),
        }
    )


def delete_table(instance: str, table: str) -> None:
    admin_client().delete_table(name=f"projects/{PROJECT}/instances/{instance}/tables/{table}")


def list_tables(instance: str) -> list[str]:
    return [
        t.name.rsplit("/", 1)[1]
        for t in admin_client().list_tables(parent=f"projects/{PROJECT}/instances/{instance}")
    ]


def column_families(instance: str, table: str) -> dict[str, Any]:
    """Family name -> its GC rule as a dict (``{}`` for no rule)."""
    from google.cloud.bigtable_admin_v2.types import table as admin_table

    got = admin_client().get_table(
        request={
            "name": f"projects/{PROJECT}/instances/{instance}/tables/{table}",
            "view": admin_table.Table.View.SCHEMA_VIEW,
        }
    )
    return {
        name: admin_table.GcRule.to_dict(family.gc_rule, always_print_fields_with_no_presence=False)
        for name, family in got.column_families.items()
    }


Cells = dict[tuple[str, bytes], list[tuple[int, bytes]]]


def read_table(instance: str, table: str, host: str | None = None) -> dict[bytes, Cells]:
    """Every row of a table: row key -> (family, qualifier) -> [(timestamp_micros, value)]."""
    from google.cloud.bigtable_v2 import BigtableClient
    from google.cloud.bigtable_v2.services.bigtable.transports import BigtableGrpcTransport

    client = BigtableClient(transport=BigtableGrpcTransport(channel=_channel(host)))
    rows: dict[bytes, Cells] = {}
    key = b""
    family = ""
    qualifier = b""
    value = b""
    name = f"projects/{PROJECT}/instances/{instance}/tables/{table}"
    for response in client.read_rows(request={"table_name": name}):
        for chunk in bigtable_types.ReadRowsResponse.pb(response).chunks:
            if chunk.row_key:
                key = chunk.row_key
            if chunk.HasField("family_name"):
                family = chunk.family_name.value
            if chunk.HasField("qualifier"):
                qualifier = chunk.qualifier.value
            value += chunk.value
            if chunk.value_size == 0:
                cells = rows.setdefault(key, {}).setdefault((family, qualifier), [])
                cells.append((chunk.timestamp_micros, value))
                value = b""
    client.transport.close()
    return rows


EntryFault = Callable[[bytes, int], grpc.StatusCode | None]


class BigtableProxy:
    """A gRPC proxy in front of the emulator that behaves like the service on request limits.

    Attributes:
        requests: (entries, mutations) of every MutateRows request that reached it.
        rejected: MutateRows requests refused for carrying more than ``max_mutations``.
        entry_fault: ``(row_key, times_seen) -> status or None``: answer that status for the
            entry instead of forwarding it (times_seen counts from 1).
        rpc_faults: Statuses to abort the next MutateRows calls with, one per call.
    """

    def __init__(self, target: str | None = None, *, max_mutations: int = 100_000) -> None:
        self.max_mutations = max_mutations
        self.requests: list[tuple[int, int]] = []
        self.rejected = 0
        self.entry_fault: EntryFault | None = None
        self.rpc_faults: list[grpc.StatusCode] = []
        self.always_fail: grpc.StatusCode | None = None
        self._seen: Counter[bytes] = Counter()
        self._lock = threading.Lock()
        self._upstream = _channel(target)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=16), options=_OPTIONS)
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop(grace=None)
        self._upstream.close()

    def __enter__(self) -> BigtableProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def forward_unary(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        call = self._upstream.unary_unary(method)

        def handler(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                return call(request, timeout=30)  # type: ignore[no-any-return]
            except grpc.RpcError as err:
                context.abort(err.code(), err.details() or "")
                raise

        return handler

    def forward_stream(self, method: str) -> Callable[[bytes, grpc.ServicerContext], Any]:
        call = self._upstream.unary_stream(method)

        def handler(request: bytes, context: grpc.ServicerContext) -> Any:
            try:
                yield from call(request, timeout=60)
            except grpc.RpcError as err:
                context.abort(err.code(), err.details() or "")

        return handler

    def mutate_rows(self, request_bytes: bytes, context: grpc.ServicerContext) -> Any:
        request = _RequestPb.FromString(request_bytes)
        mutations = sum(len(e.mutations) for e in request.entries)
        with self._lock:
            self.requests.append((len(request.entries), mutations))
            fault = self.rpc_faults.pop(0) if self.rpc_faults else self.always_fail
        if mutations > self.max_mutations:
            with self._lock:
                self.rejected += 1
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Too many mutations in the request: {mutations} > {self.max_mutations}",
            )
        if fault is not None:
            context.abort(fault, "injected by the test proxy")
        forward = _RequestPb(table_name=request.table_name, app_profile_id=request.app_profile_id)
        positions: list[int] = []
        answered = _ResponsePb()
        for position, entry in enumerate(request.entries):
            with self._lock:
                self._seen[entry.row_key] += 1
                seen = self._seen[entry.row_key]
            code = self.entry_fault(entry.row_key, seen) if self.entry_fault else None
            if code is None:
                forward.entries.append(entry)
                positions.append(position)
            else:
                result = answered.entries.add(index=position)
                result.status.code = code.value[0]
                result.status.message = "injected by the test proxy"
        if answered.entries:
            yield answered.SerializeToString()
        if not positions:
            return
        call = self._upstream.unary_stream(MUTATE_ROWS)
        try:
            for raw in call(forward.SerializeToString(), timeout=60):
                response = _ResponsePb.FromString(raw)
                for result in response.entries:
                    result.index = positions[result.index]
                yield response.SerializeToString()
        except grpc.RpcError as err:
            context.abort(err.code(), err.details() or "")


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: BigtableProxy) -> None:
        self._proxy = proxy

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        if method == MUTATE_ROWS:
            return grpc.unary_stream_rpc_method_handler(self._proxy.mutate_rows)
        if method == READ_ROWS:
            return grpc.unary_stream_rpc_method_handler(self._proxy.forward_stream(method))
        return grpc.unary_unary_rpc_method_handler(self._proxy.forward_unary(method))
