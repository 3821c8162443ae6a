"""Statuses of failed calls: the status-error type, the code table, and the record-fault rule.

Every service answers a failed write with a gRPC status, either as the call's error or inside a
response (an AppendRows error, a MutateRows entry). The sinks turn statuses found in responses
into :class:`StatusError`, shaped like a client error, so that one retry policy
(:mod:`pyflink_gcp.core.retry`) classifies both, and one rule decides what is the record's
fault and reaches the failure handler: :func:`is_record_fault`.
"""

from __future__ import annotations

import grpc

from pyflink_gcp.core.retry import status_name

#: ``grpc.StatusCode`` by its numeric value (responses carry the number).
STATUS_BY_CODE: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}

#: Statuses that say "this request's content is wrong" rather than "the service is": a request
#: failing with one is split until the rejected records are alone, and those go to the failure
#: handler. A service adds its own (Spanner: ALREADY_EXISTS and NOT_FOUND of a row).
RECORD_FAULT_CODES: frozenset[str] = frozenset(
    {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE"}
)


class StatusError(Exception):
    """A status found in a response (of one entry, or of a whole call), shaped like a client
    error (``grpc_status_code``) so the retry policy can classify it and its final error reads
    in one line."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.grpc_status_code = code

    @classmethod
    def of(cls, code: int, message: str) -> StatusError:
        """From a response's numeric status code."""
        return cls(status_from_code(code), message)


def status_from_code(code: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a numeric code (UNKNOWN for a number gRPC does not define)."""
    return STATUS_BY_CODE.get(code, grpc.StatusCode.UNKNOWN)


def is_record_fault(error: BaseException, codes: frozenset[str] = RECORD_FAULT_CODES) -> bool:
    """Whether ``error`` blames the content of the request rather than the service."""
    return status_name(error) in codes


def error_text(error: BaseException) -> str:
    """A one-line description of a client error (a raw gRPC error's ``str`` is a debug dump)."""
    if isinstance(error, grpc.RpcError) and callable(getattr(error, "details", None)):
        return f"{status_name(error)}: {error.details()}"
    return str(error)
