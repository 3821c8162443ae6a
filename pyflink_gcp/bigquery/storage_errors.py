"""What a failed Storage Write call says about its stream: the ``StorageError`` status detail.

The status code of a failed Storage Write call does not tell a stream failure from bad rows:
BigQuery answers INVALID_ARGUMENT both for rows it cannot take and for an append to a finalized
stream, and FlushRows on a finalized stream answers INVALID_ARGUMENT too (Apache Beam's
``StorageApiFlushAndFinalizeDoFn`` reads it that way). What tells them apart is the
``google.cloud.bigquery.storage.v1.StorageError`` the service packs into the status details: in
the ``error`` of an AppendRows response, and in the ``grpc-status-details-bin`` trailing
metadata of a failed unary call. Google's Java client turns it into its typed exceptions the
same way (``Exceptions.toStorageException``: STREAM_FINALIZED, STREAM_NOT_FOUND, ...), while bad
rows come back as the response's ``row_errors``.

Every StorageError code but the offset ones speaks of the stream or its table (not found,
finalized, committed, wrong type or state, schema or encryption of the table), never of one
row; the offset codes (OFFSET_ALREADY_EXISTS, OFFSET_OUT_OF_RANGE) come with their own status
codes, which the BUFFERED offset bookkeeping handles.
"""

from __future__ import annotations

from typing import Any

from google.cloud.bigquery_storage_v1 import types as storage_types
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

_StorageError = storage_types.StorageError.pb()
_Code = storage_types.StorageError.StorageErrorCode

#: The trailing metadata key of a failed gRPC call's ``google.rpc.Status``.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: StorageError codes that say the stream or its table does not exist (any more).
NOT_FOUND_CODES = frozenset({"TABLE_NOT_FOUND", "STREAM_NOT_FOUND"})
#: StorageError codes that do not speak of the stream itself.
_NOT_STREAM_CODES = frozenset(
    {"STORAGE_ERROR_CODE_UNSPECIFIED", "OFFSET_ALREADY_EXISTS", "OFFSET_OUT_OF_RANGE"}
)


def storage_error(status: Any) -> Any | None:
    """The StorageError among the details of ``status`` (a ``google.rpc.Status``), else None."""
    for detail in status.details:
        if detail.Is(_StorageError.DESCRIPTOR):
            error = _StorageError()
            if detail.Unpack(error):
                return error
    return None


def call_storage_error(exc: BaseException) -> Any | None:
    """The StorageError of a failed gRPC call (its trailing status details), else None."""
    trailing = getattr(exc, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        metadata = trailing()
    except Exception:  # noqa: BLE001 - a foreign error's accessor; classification only
        return None
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY:
            try:
                return storage_error(status_pb2.Status.FromString(value))
            except DecodeError:
                return None
    return None


def code_name(error: Any) -> str:
    """The name of a StorageError's code (``"STREAM_FINALIZED"``), its number if unknown."""
    try:
        return _Code(error.code).name
    except ValueError:
        return str(error.code)


def blames_stream(error: Any) -> bool:
    """Whether a StorageError speaks of the stream or its table rather than of the rows."""
    return code_name(error) not in _NOT_STREAM_CODES
