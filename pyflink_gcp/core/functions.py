"""The resolver and serializer contracts: adaptation, pickling checks, short record reprs."""

from __future__ import annotations

import functools
import inspect
import operator
import reprlib
import types
from collections.abc import Callable
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError

_short = reprlib.Repr()
_short.maxstring = 80
_short.maxother = 80
_short.maxdict = 6
_short.maxlist = 6
_short.maxlevel = 2


def short_repr(value: Any) -> str:
    """A bounded repr of a record for error messages and logs."""
    try:
        return _short.repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        return f"<{type(value).__name__}>"


def describe_callable(fn: Any) -> str:
    """A human name for a resolver or serializer: ``module.qualname`` or the type's name."""
    target = fn
    if not callable(fn) or hasattr(fn, "resolve") or hasattr(fn, "serialize"):
        target = type(fn)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if name is None:
        return repr(fn)
    return f"{module}.{name}" if module and module != "builtins" else name


def as_resolver(resolver: Any, sink: str) -> Callable[[Any, Any], Any]:
    """Return the ``(record, context) -> destination`` callable of a resolver.

    Accepts a callable or an object with ``resolve(record, context)``; one that takes only the
    record is adapted (:func:`with_context`).
    """
    if resolver is None:
        raise ConfigurationError(f"sink '{sink}': set_destination_resolver() is required")
    method = getattr(resolver, "resolve", None)
    if callable(method):
        return with_context(method, "destination resolver", sink)
    if callable(resolver):
        return with_context(resolver, "destination resolver", sink)
    raise ConfigurationError(
        f"sink '{sink}': the destination resolver must be a callable (record, context) or an "
        f"object with resolve(record, context); got {type(resolver).__name__}"
    )


class RecordOnly:
    """Adapts a one-argument user callable ``(record) -> ...`` to ``(record, context)``.

    Every user callable of the package is called as ``(record, context)``; one that takes only
    the record keeps working through this wrapper. It carries the wrapped function's name, so
    error messages name the user's function, and pickles as the function it wraps.
    """

    __slots__ = ("fn", "__dict__")

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, record: Any, context: Any) -> Any:
        return self.fn(record)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordOnly, (self.fn,))


#: Callables implemented in C: none of them can take a WriterContext, and most have no signature
#: Python can read, so they are one-argument conversions (``bytes``, ``str.encode``,
#: ``operator.itemgetter("id")``).
_BUILTIN_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    operator.itemgetter,
    operator.attrgetter,
    operator.methodcaller,
)


def takes_record_only(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is called with the record alone, without the context.

    True for a callable of exactly one positional parameter, and for builtins (functions and
    methods implemented in C, builtin types, ``operator`` getters), which never take a
    ``WriterContext``. Any other callable whose signature cannot be read is called
    ``(record, context)``.
    """
    if isinstance(fn, _BUILTIN_CALLABLES):
        return True
    if isinstance(fn, type) and fn.__module__ == "builtins":
        return True
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1


def with_context(fn: Any, what: str, sink: str | None = None) -> Callable[[Any, Any], Any]:
    """``fn`` as a ``(record, context)`` callable.

    Decided once, when the sink or schema is built, so the hot path calls the result without
    inspecting anything: a callable of two positional arguments is returned as it is, one of a
    single argument is wrapped in :class:`RecordOnly`.

    Args:
        fn: The user's callable.
        what: What it is, for the error (``"payload function"``).
        sink: The sink's name, when known.

    Raises:
        ConfigurationError: ``fn`` is not callable.
    """
    if isinstance(fn, RecordOnly):
        return fn
    if not callable(fn):
        where = f"sink '{sink}': " if sink else ""
        raise ConfigurationError(
            f"{where}the {what} must be a callable (record, context) or (record), "
            f"got {type(fn).__name__}"
        )
    if takes_record_only(fn):
        return RecordOnly(fn)
    return fn  # type: ignore[no-any-return]


def ensure_picklable(obj: Any, what: str, sink: str) -> None:
    """Fail at ``build()`` if ``obj`` cannot travel to the Python workers.

    PyFlink ships functions with cloudpickle; a lambda that closes over a client, a lock or an open
    file only fails on the cluster, late and far from its cause. Checking here names the part.
    """
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as exc:  # report whatever pickling raised
        culprit = _find_unpicklable(obj, cloudpickle)
        where = f" (cannot pickle {culprit})" if culprit else ""
        raise ConfigurationError(
            f"sink '{sink}': the {what} {describe_callable(obj)} is not picklable{where}: "
            f"{type(exc).__name__}: {exc}. Resolvers and serializers run on the Flink workers; "
            "create clients and connections inside them lazily instead of capturing them."
        ) from exc


def _find_unpicklable(obj: Any, cloudpickle: Any, depth: int = 0) -> str | None:
    """Best-effort search for the captured value that does not pickle (closure cells, attributes)."""
    if depth > 3:
        return None
    candidates: list[tuple[str, Any]] = []
    closure = getattr(obj, "__closure__", None)
    code = getattr(obj, "__code__", None)
    if closure and code is not None:
        candidates += list(zip(code.co_freevars, (c.cell_contents for c in closure), strict=False))
    if code is not None:
        globs = getattr(obj, "__globals__", {})
        candidates += [(n, globs[n]) for n in code.co_names if n in globs]
    elif hasattr(obj, "__dict__"):
        candidates += list(vars(obj).items())
    for name, value in candidates:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            deeper = _find_unpicklable(value, cloudpickle, depth + 1)
            label = f"'{name}' ({type(value).__name__})"
            return f"{label} -> {deeper}" if deeper else label
    return None
