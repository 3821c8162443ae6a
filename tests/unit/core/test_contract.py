"""Contract types, the resolver/serializer contract, picklability checks, retry classification."""

from __future__ import annotations

import pickle
import threading

import pytest

from pyflink_gcp.core import (
    ConfigurationError,
    FailureHandler,
    RetryPolicy,
    UnroutableRecord,
    WriteError,
    WriterContext,
)
from pyflink_gcp.core.functions import ensure_picklable, short_repr
from pyflink_gcp.core.retry import status_name
from pyflink_gcp.pubsub import PubSubSink, TopicDestination
from tests.support.fakes import FileDestination


def test_destinations_are_values_keyed_by_resource_name():
    a, b = TopicDestination.of("p", "orders"), TopicDestination.of("p", "orders")
    assert a == b and hash(a) == hash(b) and a is not b
    assert str(a) == "projects/p/topics/orders"
    assert {a: 1}[b] == 1
    assert a != TopicDestination.of("p", "other")
    assert a != FileDestination.of("projects/p/topics/orders")
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.x = 1  # type: ignore[attr-defined]


def test_topic_names_are_validated_with_the_name_in_the_message():
    with pytest.raises(ValueError, match="invalid Pub/Sub topic id 'ab'"):
        TopicDestination.of("p", "ab")


def test_writer_context_has_no_wall_clock_and_normalises_missing_timestamps():
    ctx = WriterContext(subtask_index=1, number_of_parallel_subtasks=4)
    ctx._set_time(-(2**63), 5)
    assert ctx.timestamp is None and ctx.current_watermark == 5
    ctx._set_time(1_700_000_000_000, None)
    assert ctx.timestamp == 1_700_000_000_000 and ctx.current_watermark == 5
    assert not hasattr(ctx, "now")


def test_unroutable_record_requires_bytes():
    assert UnroutableRecord.of(b"x", "unknown tenant").reason == "unknown tenant"
    with pytest.raises(TypeError):
        UnroutableRecord.of("x", "r")  # type: ignore[arg-type]


def test_unpicklable_resolver_is_refused_at_build_naming_the_captured_value():
    lock = threading.Lock()

    def resolver(record, ctx):
        with lock:
            return TopicDestination.of("p", "orders")

    with pytest.raises(ConfigurationError) as err:
        PubSubSink.builder().set_destination_resolver(resolver).set_serializer(
            lambda r: b""
        ).build()
    assert str(err.value).startswith(
        "sink 'pubsub-sink': the destination resolver "
        "tests.unit.core.test_contract."
        "test_unpicklable_resolver_is_refused_at_build_naming_the_captured_value.<locals>.resolver "
        "is not picklable (cannot pickle 'lock' (lock)): TypeError: cannot pickle '_thread.lock' object."
    )


def test_ensure_picklable_accepts_plain_functions_and_objects():
    ensure_picklable(lambda r, c: r, "resolver", "s")
    ensure_picklable(FailureHandler.log_and_drop(), "failure handler", "s")


def test_short_repr_is_bounded():
    assert len(short_repr({"k": "x" * 10_000, "n": list(range(1000))})) < 250


class _RpcError(Exception):
    def __init__(self, name):
        self._name = name

    def code(self):
        return type("Code", (), {"name": self._name})()


def test_status_classification_and_retries_until_the_deadline():
    assert status_name(_RpcError("UNAVAILABLE")) == "UNAVAILABLE"
    assert status_name(ValueError()) is None
    policy = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=0.05)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise _RpcError("UNAVAILABLE")
        return "ok"

    assert policy.call(flaky, "x") == "ok" and len(calls) == 3
    with pytest.raises(WriteError, match="still failing after"):
        policy.call(lambda: (_ for _ in ()).throw(_RpcError("UNAVAILABLE")), "sink 's': write")
    with pytest.raises(_RpcError):
        policy.call(lambda: (_ for _ in ()).throw(_RpcError("PERMISSION_DENIED")), "x")
