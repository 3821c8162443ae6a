"""The resolver and serializer contracts: adaptation, pickling checks, short record reprs."""

from __future__ import annotations

import reprlib
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

    Accepts a callable or an object with ``resolve(record, context)``.
    """
    if resolver is None:
        raise ConfigurationError(f"sink '{sink}': set_destination_resolver() is required")
    method = getattr(resolver, "resolve", None)
    if callable(method):
        return method  # type: ignore[no-any-return]
    if callable(resolver):
        return resolver  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"sink '{sink}': the destination resolver must be a callable (record, context) or an "
        f"object with resolve(record, context); got {type(resolver).__name__}"
    )


def ensure_picklable(obj: Any, what: str, sink: str) -> None:
    """Fail at ``build()`` if ``obj`` cannot travel to the Python workers.

    PyFlink ships functions with cloudpickle; a lambda that closes over a client, a lock or an open
    file only fails on the cluster, late and far from its cause. Checking here names the part.
    """
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - report whatever pickling raised
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
