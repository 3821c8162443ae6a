"""FailureRouter: what each handler does with a failed record, bounded logging, console output."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pyflink_gcp.core import (
    FailedRecord,
    FailureHandler,
    RecordRejectedError,
    RecordSchemaError,
    SubtaskInfo,
)
from pyflink_gcp.core.errors import is_non_retriable
from pyflink_gcp.core.failure import CONSOLE_LOG_VARIABLE, FailureRouter
from tests.support.dead_letters import MemoryDeadLetterQueue


def failed(i: int, destination: str = "projects/p/topics/a") -> FailedRecord:
    return FailedRecord("orders", destination, "too big", b"x", record_repr=f"{{'i': {i}}}")


@pytest.fixture(autouse=True)
def no_console_handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keeps the console handler out unless a test asks for it (it outlives the test): off by
    the variable, and without one that a job run earlier in this process installed."""
    monkeypatch.setenv(CONSOLE_LOG_VARIABLE, "0")
    logger = logging.getLogger("pyflink_gcp")
    before = list(logger.handlers)
    logger.handlers = [h for h in before if type(h).__name__ != "_ConsoleHandler"]
    try:
        yield
    finally:
        logger.handlers = before


def open_router(handler: FailureHandler) -> FailureRouter:
    router = FailureRouter(handler)
    router.open(SubtaskInfo("orders"))
    return router


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pyflink_gcp.failures"]


def test_fail_job_raises_naming_the_sink_destination_and_record() -> None:
    router = open_router(FailureHandler.fail_job())
    with pytest.raises(
        RecordRejectedError, match=r"sink 'orders'.*topics/a.*'i': 1.*fail_job"
    ) as err:
        router.handle(failed(1))
    # A rejection is retriable (the restart strategy decides), and the message says the replay
    # meets the record again and which handlers let the job go on.
    assert not is_non_retriable(err.value)
    assert str(err.value).endswith(
        "(failure handler: fail_job). A restart replays this record: fix its cause, or let the "
        "job go on past such records with FailureHandler.log_and_drop() or "
        "send_to_dead_letter_queue(...)"
    )
    # A front end configured in other terms (the SQL connectors' option) words its own remedy.
    worded = open_router(FailureHandler.fail_job(remedy="(set 'on-error' = 'skip')"))
    with pytest.raises(RecordRejectedError) as err:
        worded.handle(failed(1))
    assert str(err.value).endswith("{'i': 1}: too big (set 'on-error' = 'skip')")


def test_drops_log_the_first_records_then_one_summary_per_flush(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "pyflink_gcp.failures")
    router = open_router(FailureHandler.log_and_drop())
    for i in range(FailureRouter.LOG_FIRST + 25):
        router.handle(failed(i, "projects/p/topics/a" if i % 5 else "unresolved"))
    lines = warnings(caplog)
    assert len(lines) == FailureRouter.LOG_FIRST
    assert lines[1].startswith("dropped: sink 'orders': destination 'projects/p/topics/a'")
    assert "{'i': 1}" in lines[1] and "too big" in lines[1]
    router.flush()
    summary = warnings(caplog)[-1]
    assert "sink 'orders': dropped 25 more records since the last flush" in summary
    assert "projects/p/topics/a: 20, unresolved: 5" in summary
    assert "35 dropped in all" in summary
    assert router.dropped == 35 and router.dead_lettered == 0
    # The next flush period logs its first records again; a flush with nothing new is silent.
    router.flush()
    router.handle(failed(99))
    assert len(warnings(caplog)) == FailureRouter.LOG_FIRST + 2


def test_dead_letters_are_sent_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "pyflink_gcp.failures")
    dlq = MemoryDeadLetterQueue()
    router = open_router(FailureHandler.send_to_dead_letter_queue(dlq))
    for i in range(FailureRouter.LOG_FIRST + 1):
        router.handle(failed(i))
    router.close()
    assert len(dlq.sent) == router.dead_lettered == FailureRouter.LOG_FIRST + 1
    assert warnings(caplog)[0].startswith("dead-lettered: sink 'orders'")
    assert "dead-lettered 1 more records" in warnings(caplog)[-1]


def test_the_console_handler_writes_to_file_descriptor_2_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(CONSOLE_LOG_VARIABLE, "1")
    logger = logging.getLogger("pyflink_gcp")
    before = list(logger.handlers)
    try:
        router = open_router(FailureHandler.log_and_drop())
        open_router(FailureHandler.log_and_drop())  # a second subtask in the same process
        router.handle(failed(7))
        err = capfd.readouterr().err
        assert err.count("WARNING pyflink_gcp.failures: dropped: sink 'orders'") == 1
    finally:
        logger.handlers = before


def test_the_console_handler_can_be_turned_off(capfd: pytest.CaptureFixture[str]) -> None:
    router = open_router(FailureHandler.log_and_drop())
    router.handle(failed(7))
    assert "dropped" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "handler",
    [
        FailureHandler.log_and_drop(),
        FailureHandler.send_to_dead_letter_queue(MemoryDeadLetterQueue()),
    ],
)
def test_a_fatal_failure_ends_the_job_whatever_the_handler(handler: FailureHandler) -> None:
    router = open_router(handler)
    record = failed(3)
    record.fatal = "set unknown_fields to go on"
    with pytest.raises(RecordSchemaError, match=r"sink 'orders'.*'i': 3.*too big\. set unknown_f"):
        router.handle(record)
    # A replay meets the same record: not worth a restart.
    assert is_non_retriable(RecordSchemaError("x"))
    assert router.dropped == router.dead_lettered == 0
