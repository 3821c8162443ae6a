"""The user-callable contract: (record, ctx) adaptation, picklability checks, short reprs."""

from __future__ import annotations

import functools
import pickle
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pyflink_gcp.core import ConfigurationError, FailureHandler
from pyflink_gcp.core.functions import (
    RecordOnly,
    as_resolver,
    describe_callable,
    ensure_picklable,
    short_repr,
    with_context,
)
from tests.support.fakes import FileDestination, FileSinkBuilder


def test_unpicklable_resolver_is_refused_at_build_naming_the_captured_value():
    lock = threading.Lock()

    def resolver(record, ctx):
        with lock:
            return FileDestination.of("orders")

    with pytest.raises(ConfigurationError) as err:
        FileSinkBuilder().set_destination_resolver(resolver).set_serializer(lambda r: b"").build()
    assert str(err.value).startswith(
        "sink 'file-sink': the destination resolver "
        "tests.unit.core.test_functions."
        "test_unpicklable_resolver_is_refused_at_build_naming_the_captured_value.<locals>.resolver "
        "is not picklable: it captures closure variable 'lock' (_thread.lock) of "
        "tests.unit.core.test_functions."
        "test_unpicklable_resolver_is_refused_at_build_naming_the_captured_value.<locals>.resolver"
        ", which cannot be pickled (TypeError: cannot pickle '_thread.lock' object)."
    )


#: A job's main module: its functions are pickled by value, with the globals they read.
JOB = """
import functools
import socket

sock = socket.socket()
clients = {"orders": sock}

def to_row(record):
    sock.sendall(b"x")
    return {"id": record}

def to_row_nested(record, context):
    return (lambda r: sock.sendall(r))(record)

def via_dict(record):
    return clients["orders"]

def with_default(record, out=sock):
    return out

class Serializer:
    def serialize(self, record, context):
        sock.sendall(b"x")
        return {}

class Holder:
    def __init__(self):
        self.client = sock

    def serialize(self, record, context):
        return {}

def send(target, record):
    return target

partial = functools.partial(send, sock)
"""


@pytest.fixture
def job() -> Iterator[dict[str, Any]]:
    scope: dict[str, Any] = {"__name__": "__main__"}
    exec(JOB, scope)  # a stand-in for a job script run as __main__
    yield scope
    scope["sock"].close()


@pytest.mark.parametrize(
    ("name", "culprit"),
    [
        ("to_row", "global variable 'sock' (socket.socket) used by __main__.to_row"),
        ("to_row_nested", "global variable 'sock' (socket.socket) used by __main__.to_row_nested"),
        (
            "via_dict",
            "global variable 'clients' (dict) used by __main__.via_dict -> item 'orders' "
            "(socket.socket)",
        ),
        ("with_default", "default of parameter 'out' (socket.socket) of __main__.with_default"),
        ("partial", "argument 0 (socket.socket) of a functools.partial"),
    ],
)
def test_a_captured_module_level_socket_is_named_with_its_type(
    job: dict[str, Any], name: str, culprit: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        ensure_picklable(job[name], "serializer", "s")
    message = str(err.value)
    assert f"is not picklable: it captures {culprit}, which cannot be pickled (TypeError: " in (
        message
    )


def test_the_captured_variable_is_found_through_objects_wrappers_and_methods(
    job: dict[str, Any],
) -> None:
    from pyflink_gcp.bigquery import BigQuerySerializer

    used_by = "global variable 'sock' (socket.socket) used by __main__"
    cases = [
        (job["Serializer"](), f"{used_by}.Serializer.serialize"),
        (job["Serializer"]().serialize, f"{used_by}.Serializer.serialize"),
        (job["Holder"](), "attribute 'client' (socket.socket) of __main__.Holder"),
        (BigQuerySerializer.of(job["to_row"]), f"{used_by}.to_row"),
        (with_context(job["to_row"], "serializer"), f"{used_by}.to_row"),
    ]
    for obj, culprit in cases:
        with pytest.raises(ConfigurationError, match=f"it captures {re.escape(culprit)}, which"):
            ensure_picklable(obj, "serializer", "s")


def test_a_sink_names_the_captured_global_of_its_resolver(job: dict[str, Any]) -> None:
    scope = job
    exec("def resolver(record, ctx):\n    sock.sendall(b'x')\n    return None\n", scope)
    with pytest.raises(ConfigurationError) as err:
        FileSinkBuilder().set_destination_resolver(scope["resolver"]).set_serializer(
            lambda r: b""
        ).build()
    assert str(err.value).startswith(
        "sink 'file-sink': the destination resolver __main__.resolver is not picklable: it "
        "captures global variable 'sock' (socket.socket) used by __main__.resolver, which cannot "
        "be pickled (TypeError: cannot pickle 'socket' object)."
    )


def test_ensure_picklable_accepts_plain_functions_and_objects():
    ensure_picklable(lambda r, c: r, "resolver", "s")
    ensure_picklable(FailureHandler.log_and_drop(), "failure handler", "s")


def test_short_repr_is_bounded():
    assert len(short_repr({"k": "x" * 10_000, "n": list(range(1000))})) < 250


def _record_only(record):
    return ("one", record)


def _with_context(record, ctx):
    return ("two", record, ctx)


class _Resolver:
    def resolve(self, record):
        return record * 2


def test_one_argument_callables_are_wrapped_once_and_two_argument_ones_kept():
    one = with_context(_record_only, "payload function")
    assert isinstance(one, RecordOnly) and one(1, "ctx") == ("one", 1)
    assert with_context(one, "payload function") is one
    assert with_context(_with_context, "payload function") is _with_context
    assert with_context(lambda r, c=None: (r, c), "x")(1, 2) == (1, 2)
    assert with_context(lambda *a: a, "x")(1, 2) == (1, 2)
    partial = with_context(functools.partial(_with_context, 1), "x")
    assert isinstance(partial, RecordOnly) and partial("ctx", None) == ("two", 1, "ctx")


def test_builtins_are_conversions_of_the_record():
    import operator

    assert with_context(bytes, "body function")(3, "ctx") == b"\x00\x00\x00"
    assert with_context(str.encode, "payload function")("é", "ctx") == "é".encode()
    assert with_context(operator.itemgetter("id"), "task id")({"id": 7}, "ctx") == 7
    assert with_context(len, "x")([1, 2], "ctx") == 2
    assert with_context(",".join, "x")(["a", "b"], "ctx") == "a,b"


def test_a_wrapped_callable_keeps_its_name_and_pickles():
    one = with_context(_record_only, "payload function")
    assert describe_callable(one) == "tests.unit.core.test_functions._record_only"
    again = pickle.loads(pickle.dumps(one))
    assert again(3, None) == ("one", 3)


def test_resolvers_of_one_argument_and_resolve_objects_are_adapted():
    assert as_resolver(_Resolver(), "s")(2, None) == 4
    assert as_resolver(lambda r: r + 1, "s")(1, None) == 2


def test_a_non_callable_is_refused_naming_the_sink_and_the_role():
    with pytest.raises(ConfigurationError, match="sink 's': the body function must be a callable"):
        with_context(42, "body function", "s")
