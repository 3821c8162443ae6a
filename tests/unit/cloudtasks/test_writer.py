"""The queue writer and its factory against a scripted fake channel: outcomes, retries, limits,
the in-flight window, pickling."""

from __future__ import annotations

from collections import deque
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks import CloudTasksSerializationSchema, CloudTasksWriterOptions
from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory, QueueWriter
from pyflink_gcp.core import (
    DestinationNotFoundError,
    RetryPolicy,
    SerializerError,
    SubtaskInfo,
    WriteError,
)
from pyflink_gcp.core.endpoints import Endpoint

QUEUE = QueueDestination.of("p", "us-central1", "hooks")
URL = "https://example.com/hook"
CreateTaskRequestPb = tasks_v2.CreateTaskRequest.pb()


class FakeError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "scripted") -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeFuture:
    def __init__(self, error: BaseException | None) -> None:
        self._error = error

    def done(self) -> bool:
        return True

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._error

    def add_done_callback(self, fn: Any) -> None:
        fn(self)  # done already: a grpc.Future runs the callback at once


class FakeChannel:
    """Answers each call with the next scripted outcome (None: OK) and records the requests."""

    def __init__(self) -> None:
        self.script: deque[grpc.StatusCode | None] = deque()
        self.requests: list[Any] = []
        self.metadata: list[Any] = []
        self.closed = False

    def unary_unary(self, method: str, **kwargs: Any) -> Any:
        assert method == "/google.cloud.tasks.v2.CloudTasks/CreateTask"
        channel = self

        class Callable_:
            def future(self, request: bytes, timeout: float, metadata: Any) -> FakeFuture:
                channel.requests.append(CreateTaskRequestPb.FromString(request))
                channel.metadata.append(metadata)
                code = channel.script.popleft() if channel.script else None
                return FakeFuture(None if code is None else FakeError(code))

        return Callable_()

    def close(self) -> None:
        self.closed = True


class FakeFactory(CloudTasksWriterFactory):
    def __init__(self, **options: Any) -> None:
        opts = CloudTasksWriterOptions(verify_queues=False, **options)
        super().__init__(
            "hooks-sink",
            opts,
            retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=0.2),
        )
        self.channel = FakeChannel()

    def _open_channels(self, endpoint: Endpoint) -> list[Any]:
        return [self.channel]


def _writer(**options: Any) -> tuple[FakeFactory, QueueWriter]:
    factory = FakeFactory(**options)
    factory.open(SubtaskInfo("hooks-sink"))
    return factory, factory.create_writer(QUEUE)


def _task(task_id: str | None = None, body: bytes = b"{}") -> Any:
    schema = CloudTasksSerializationSchema.http_target(URL).with_body(lambda r: body)
    if task_id is not None:
        schema = schema.with_task_id(lambda r: task_id)
    return schema.serialize("record")


def test_request_names_queue_and_task() -> None:
    factory, writer = _writer()
    writer.write(_task("abc-1"), "record")
    assert not writer.is_clean
    assert writer.flush() == []
    assert writer.is_clean
    (request,) = factory.channel.requests
    assert request.parent == str(QUEUE)
    assert request.task.name == f"{QUEUE}/tasks/abc-1"
    assert request.task.http_request.url == URL
    routing = dict(factory.channel.metadata[0])["x-goog-request-params"]
    assert routing == f"parent={QUEUE}"
    assert factory.created == 1


def test_already_exists_counts_as_written() -> None:
    factory, writer = _writer()
    factory.channel.script.extend([grpc.StatusCode.ALREADY_EXISTS])
    writer.write(_task("abc"), "record")
    assert writer.flush() == []
    assert (factory.created, factory.already_existed) == (0, 1)


def test_transient_errors_are_retried_then_succeed() -> None:
    factory, writer = _writer()
    factory.channel.script.extend(
        [grpc.StatusCode.UNAVAILABLE, None, grpc.StatusCode.DEADLINE_EXCEEDED, None]
    )
    for i in range(3):
        writer.write(_task(f"t{i}"), i)
    assert writer.flush() == []
    assert factory.retried == 2
    names = [r.task.name.rsplit("/", 1)[1] for r in factory.channel.requests]
    assert names == ["t0", "t1", "t2", "t0", "t2"]


def test_transient_errors_past_the_deadline_fail_the_job() -> None:
    factory, writer = _writer()
    factory.channel.script.extend([grpc.StatusCode.UNAVAILABLE] * 10_000)
    writer.write(_task(), "record")
    with pytest.raises(WriteError, match="hooks-sink.*creating 1 tasks in projects/p"):
        writer.flush()


def test_invalid_argument_goes_to_the_failure_handler() -> None:
    factory, writer = _writer()
    factory.channel.script.extend([None, grpc.StatusCode.INVALID_ARGUMENT])
    writer.write(_task("ok"), "r1")
    writer.write(_task("bad", body=b"payload"), {"id": "r2"})
    (failed,) = writer.flush()
    assert failed.destination == str(QUEUE)
    assert failed.reason.startswith("INVALID_ARGUMENT")
    assert failed.payload == b"payload"
    assert failed.attributes == {"queue": str(QUEUE), "task": "bad", "url": URL}
    assert "r2" in failed.record_repr
    assert factory.rejected == 1


def test_not_found_names_the_queue() -> None:
    factory, writer = _writer()
    factory.channel.script.extend([grpc.StatusCode.NOT_FOUND])
    writer.write(_task(), "record")
    with pytest.raises(DestinationNotFoundError, match="queues/hooks' does not exist"):
        writer.flush()


def test_permission_denied_fails_the_job() -> None:
    factory, writer = _writer()
    factory.channel.script.extend([grpc.StatusCode.PERMISSION_DENIED])
    writer.write(_task(), "record")
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        writer.flush()


def test_oversized_and_invalid_tasks_are_rejected_without_a_call() -> None:
    factory, writer = _writer(max_task_size_bytes=1000)
    writer.write(_task(body=b"x" * 2000), "big")
    writer.write(_task("not valid!"), "bad id")
    bad_url = _task()
    bad_url.http_request.url = "ftp://example.com"
    writer.write(bad_url, "bad url")
    writer.write(_task(body=b"x" * 500), "fits")
    assert not writer.is_clean
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["'big'", "'bad id'", "'bad url'"]
    assert "exceeds the 1000-byte limit" in failures[0].reason
    assert failures[0].payload == b"x" * 2000
    assert "invalid task id" in failures[1].reason
    assert "invalid URL" in failures[2].reason
    assert len(factory.channel.requests) == 1


def test_serializer_bugs_fail_the_job() -> None:
    factory, writer = _writer()
    with pytest.raises(SerializerError, match="hooks-sink.*returned dict.*queues/hooks"):
        writer.write({"url": URL}, "record")
    foreign = _task()
    foreign.name = "projects/p/locations/l/queues/other/tasks/x"
    with pytest.raises(SerializerError, match="does not belong to queue"):
        writer.write(foreign, "record")


def test_proto_plus_tasks_and_full_names_are_accepted() -> None:
    factory, writer = _writer()
    writer.write(
        tasks_v2.Task(name=f"{QUEUE}/tasks/full", http_request=tasks_v2.HttpRequest(url=URL)), "r"
    )
    writer.write(tasks_v2.Task(app_engine_http_request=tasks_v2.AppEngineHttpRequest()), "r")
    assert writer.flush() == []
    assert factory.channel.requests[0].task.name == f"{QUEUE}/tasks/full"
    assert factory.channel.requests[1].task.HasField("app_engine_http_request")


def test_in_flight_window_and_pending_stay_bounded() -> None:
    factory, writer = _writer(max_in_flight_requests=4)
    factory.channel.script.extend([None] * 50 + [grpc.StatusCode.INVALID_ARGUMENT])
    for i in range(51):
        writer.write(_task(), i)
        assert factory.calls is not None and factory.calls.window.outstanding <= 4
        assert len(writer._pending) <= 16
    assert len(writer.flush()) == 1  # the failure survived compaction
    assert factory.created == 50
    assert factory.calls.window.outstanding == 0


def test_the_window_waits_no_longer_than_one_call_with_its_retries_can_last() -> None:
    factory, _ = _writer()
    assert factory.calls is not None
    assert factory.calls.window.stall_s == factory.retry.stall_bound(factory.calls._timeout)


def test_channels_spread_and_close() -> None:
    factory = FakeFactory(channel_count=2)
    channels = [FakeChannel(), FakeChannel()]
    factory._open_channels = lambda endpoint: channels  # type: ignore[method-assign]
    factory.open(SubtaskInfo("hooks-sink"))
    writer = factory.create_writer(QUEUE)
    for _ in range(4):
        writer.write(_task(), "r")
    writer.flush()
    assert [len(c.requests) for c in channels] == [2, 2]
    factory.close()
    assert all(c.closed for c in channels)


def test_factory_pickles_as_its_configuration_only() -> None:
    import cloudpickle

    factory, writer = _writer(retry_deadline=timedelta(seconds=3))
    writer.write(_task(), "record")
    assert factory.calls is not None and factory._start_call is not None
    copy = cloudpickle.loads(cloudpickle.dumps(factory))
    assert set(factory.__getstate__()) == {"sink_name", "options", "endpoint", "retry"}
    assert copy._channels == [] and copy._start_call is None and copy.calls is None
    assert copy.queue_check is None and copy.created == 0
    assert copy.options == factory.options and copy.retry.deadline_s == 0.2
    # rpc_timeout is 30 s, but one attempt never outlasts the 0.2 s deadline (at least 5 s).
    assert copy._max_in_flight == 256 and copy._timeout == 5.0


def test_bytes_accepted_counts_the_encoded_tasks() -> None:
    factory, writer = _writer()
    task = _task("t", body=b"x" * 40)
    writer.write(task, "record")
    # The writer completed the name in place: the bytes counted are the task sent.
    size = len(task.SerializeToString())
    assert task.name == f"{QUEUE}/tasks/t" and writer.bytes_accepted == size
    writer.write(_task(body=b"y" * 2_000_000), "too big")  # rejected: not accepted bytes
    assert writer.bytes_accepted == size


class RecordingCheck:
    def __init__(self) -> None:
        self.queues: list[str] = []

    def start(self, destination: QueueDestination) -> None:
        self.queues.append(str(destination))

    def close(self) -> None:
        pass


def test_the_queue_check_starts_when_a_writer_is_created_when_enabled() -> None:
    factory = FakeFactory()
    factory.options = CloudTasksWriterOptions(verify_queues=True)
    factory.open(SubtaskInfo("hooks-sink"))
    assert factory.queue_check is not None
    factory.queue_check.close()
    check = RecordingCheck()
    factory.queue_check = check  # type: ignore[assignment]
    factory.create_writer(QUEUE)
    assert check.queues == [str(QUEUE)]
    unchecked, _ = _writer()
    assert unchecked.queue_check is None


class SlowGetQueue:
    """A raw GetQueue whose first attempt answers ``outcome`` only after ``delay_s``; the
    blocking full check answers at once."""

    def __init__(self, outcome: BaseException, delay_s: float) -> None:
        self.outcome = outcome
        self.delay_s = delay_s
        self.calls = 0

    def __call__(self, request: Any, timeout: float, metadata: Any) -> Any:
        self.calls += 1
        raise self.outcome

    def future(self, request: Any, timeout: float, metadata: Any) -> Any:
        import threading
        from concurrent.futures import Future

        self.calls += 1
        future: Future[Any] = Future()
        threading.Timer(self.delay_s, future.set_exception, (self.outcome,)).start()
        return future


def _checked_writer(get_queue: Any) -> tuple[FakeFactory, QueueWriter]:
    factory = FakeFactory()
    factory.options = CloudTasksWriterOptions(verify_queues=True)
    factory.open(SubtaskInfo("hooks-sink"))
    assert factory.queue_check is not None
    factory.queue_check._stub = get_queue
    return factory, factory.create_writer(QUEUE)


def test_a_slow_queue_check_does_not_delay_writes_and_fails_the_flush() -> None:
    import time

    get_queue = SlowGetQueue(FakeError(grpc.StatusCode.NOT_FOUND), delay_s=1.0)
    start = time.monotonic()
    factory, writer = _checked_writer(get_queue)
    for i in range(3):
        writer.write(_task(f"t-{i}"), f"record {i}")
    # The tasks were sent while GetQueue was still unanswered.
    assert time.monotonic() - start < 0.5
    assert len(factory.channel.requests) == 3 and get_queue.calls == 1
    # The CreateTasks succeeded, but the flush settles the check first: the queue's error.
    with pytest.raises(
        DestinationNotFoundError,
        match="queues/hooks' does not exist.*gcloud tasks queues create hooks "
        "--location=us-central1 --project=p",
    ):
        writer.flush()
    assert time.monotonic() - start >= 1.0
    assert factory.created == 0
    factory.close()


def test_a_failed_queue_check_fails_writes_once_calls_are_compacted() -> None:
    get_queue = SlowGetQueue(FakeError(grpc.StatusCode.NOT_FOUND), delay_s=0.0)
    factory, writer = _checked_writer(get_queue)
    check = writer._check
    assert check is not None
    with pytest.raises(DestinationNotFoundError):
        check.wait()  # settled here rather than on the pool: no race with the writes below
    # Calls of a missing queue all fail: the writer stops at its next compaction rather than
    # keeping them until the checkpoint.
    with pytest.raises(DestinationNotFoundError, match="queues/hooks' does not exist"):
        for i in range(5 * factory.options.max_in_flight_requests):
            writer.write(_task(f"t-{i}"), f"record {i}")
    assert len(factory.channel.requests) == 4 * factory.options.max_in_flight_requests
    factory.close()


class QueueAnswers(SlowGetQueue):
    """A raw GetQueue whose first attempt answers a queue in ``state`` at once."""

    def __init__(self, state: Any) -> None:
        super().__init__(FakeError(grpc.StatusCode.INTERNAL), 0.0)
        self.state = state

    def future(self, request: Any, timeout: float, metadata: Any) -> Any:
        from concurrent.futures import Future

        self.calls += 1
        future: Future[Any] = Future()
        future.set_result(tasks_v2.Queue.pb()(name=request.name, state=self.state))
        return future


def test_a_disabled_queue_fails_the_flush_and_a_found_queue_is_not_checked_again() -> None:
    disabled = QueueAnswers(tasks_v2.Queue.State.DISABLED)
    factory, writer = _checked_writer(disabled)
    writer.write(_task("t"), "record")
    with pytest.raises(WriteError, match="is DISABLED and accepts no tasks"):
        writer.flush()
    factory.close()

    running = QueueAnswers(tasks_v2.Queue.State.RUNNING)
    factory, writer = _checked_writer(running)
    writer.write(_task("t"), "record")
    assert writer.flush() == []
    writer.close()
    again = factory.create_writer(QUEUE)  # an evicted queue's new writer
    again.write(_task("u"), "record")
    assert again.flush() == [] and running.calls == 1
    factory.close()


@pytest.mark.parametrize("body_size", [0, 100, 127, 128, 16_383, 16_384, 90_000])
def test_request_bytes_equal_the_generated_encoding(body_size: int) -> None:
    """The request is assembled from bytes (parent once, then each task): the exact encoding
    of the generated CreateTaskRequest, across every length-prefix width."""
    factory = FakeFactory()
    factory.open(SubtaskInfo("hooks-sink"))
    sent: list[bytes] = []
    assert factory.calls is not None
    start = factory.calls.start

    def recording_start(request: bytes, metadata: Any) -> Any:
        sent.append(request)
        return start(request, metadata)

    factory.calls.start = recording_start  # type: ignore[method-assign]
    writer = factory.create_writer(QUEUE)
    writer.write(_task("t-1", body=b"b" * body_size), "record")
    assert writer.flush() == []
    # The writer completed the name in place before encoding.
    expected = CreateTaskRequestPb(
        parent=str(QUEUE), task=factory.channel.requests[0].task
    ).SerializeToString()
    assert sent == [expected]
    assert factory.channel.requests[0].task.http_request.body == b"b" * body_size


def test_each_call_s_completion_frees_its_slot_and_a_quota_error_shrinks_the_window() -> None:
    factory, writer = _writer(max_in_flight_requests=8)
    factory.channel.script.extend([grpc.StatusCode.RESOURCE_EXHAUSTED, None, None])
    for i in range(3):
        writer.write(_task(), i)
    assert factory.calls is not None and factory.calls.window.outstanding == 0
    assert factory.quota.quota_errors >= 1 and factory.quota.limit < 8
    assert writer.flush() == []  # the quota-refused task is retried
    assert factory.created == 3 and factory.retried == 1
