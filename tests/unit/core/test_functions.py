"""The user-callable contract: (record, ctx) adaptation, picklability checks, short reprs."""

from __future__ import annotations

import functools
import pickle
import threading

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
        "is not picklable (cannot pickle 'lock' (lock)): TypeError: cannot pickle '_thread.lock' object."
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
