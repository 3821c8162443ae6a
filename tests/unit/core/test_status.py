"""Statuses of failed calls: the status-error type, the code table and the record-fault rule."""

from __future__ import annotations

import grpc

from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.status import (
    RECORD_FAULT_CODES,
    StatusError,
    error_text,
    is_record_fault,
    status_from_code,
)


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_a_status_from_a_response_classifies_like_a_client_error():
    error = StatusError.of(14, "backend unavailable")
    assert error.grpc_status_code is grpc.StatusCode.UNAVAILABLE
    assert status_name(error) == "UNAVAILABLE" and RetryPolicy().is_transient(error)
    assert status_from_code(12345) is grpc.StatusCode.UNKNOWN


def test_record_faults_are_content_errors_and_a_service_can_add_its_own():
    assert is_record_fault(StatusError(grpc.StatusCode.INVALID_ARGUMENT, "bad row"))
    assert not is_record_fault(StatusError(grpc.StatusCode.UNAVAILABLE, "down"))
    assert not is_record_fault(ValueError("no status"))
    exists = StatusError(grpc.StatusCode.ALREADY_EXISTS, "row exists")
    assert not is_record_fault(exists)
    assert is_record_fault(exists, RECORD_FAULT_CODES | {"ALREADY_EXISTS"})


def test_error_text_is_one_line_for_raw_grpc_errors():
    assert error_text(_RpcError(grpc.StatusCode.NOT_FOUND, "no table t")) == "NOT_FOUND: no table t"
    assert error_text(ValueError("plain")) == "plain"
