"""Which sink errors a restart cannot fix, and the mark they carry out of the Python worker."""

from __future__ import annotations

import traceback

import pytest

from pyflink_gcp.core.errors import (
    NON_RETRIABLE_MARKER,
    ConfigurationError,
    CreationLimitExceededError,
    DestinationNotFoundError,
    NonRetriableSinkError,
    RecordRejectedError,
    ResolverError,
    SerializerError,
    SinkError,
    WriteError,
    is_non_retriable,
    mark_non_retriable,
)

NON_RETRIABLE = [
    ConfigurationError,
    ResolverError,
    SerializerError,
    DestinationNotFoundError,
    CreationLimitExceededError,
]
RETRIABLE = [WriteError, RecordRejectedError, SinkError, RuntimeError, OSError]


@pytest.mark.parametrize("cls", NON_RETRIABLE)
def test_configuration_and_contract_errors_are_non_retriable(cls):
    assert issubclass(cls, NonRetriableSinkError) and issubclass(cls, SinkError)
    assert is_non_retriable(cls("sink 'x': boom"))


@pytest.mark.parametrize("cls", RETRIABLE)
def test_transient_and_record_errors_are_not(cls):
    exc = cls("sink 'x': boom")
    assert not is_non_retriable(exc)
    assert mark_non_retriable(exc) is False
    assert NON_RETRIABLE_MARKER not in "".join(traceback.format_exception(exc))


def test_configuration_error_is_still_a_value_error():
    assert issubclass(ConfigurationError, ValueError)


def raise_and_format(exc: BaseException) -> str:
    """What PyFlink's worker sends to the JVM: the formatted traceback of the error."""
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - formatting whatever was raised
        mark_non_retriable(caught)
        return traceback.format_exc()


def test_the_mark_is_in_the_traceback_and_the_message_is_unchanged():
    exc = ResolverError("sink 'orders': destination resolver f returned None for record {}")
    text = raise_and_format(exc)
    assert NON_RETRIABLE_MARKER in text
    assert str(exc) == "sink 'orders': destination resolver f returned None for record {}"
    assert "ResolverError: sink 'orders': destination resolver f returned None" in text


def test_marking_twice_adds_one_note():
    exc = DestinationNotFoundError("sink 'x': topic t does not exist")
    assert mark_non_retriable(exc) and mark_non_retriable(exc)
    assert exc.__notes__ == [NON_RETRIABLE_MARKER]


def test_a_retriable_error_wrapping_a_non_retriable_one_is_not_marked():
    """The outermost error decides: its cause is printed in the traceback, unmarked."""
    cause = DestinationNotFoundError("sink 'x': topic t does not exist")
    try:
        try:
            raise cause
        except DestinationNotFoundError as inner:
            raise WriteError("sink 'x': publish to t failed after retries") from inner
    except WriteError as outer:
        assert mark_non_retriable(outer) is False
        text = traceback.format_exc()
    assert "DestinationNotFoundError" in text
    assert NON_RETRIABLE_MARKER not in text
