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
    file only fails on the cluster, late and far from its cause. Checking here names the captured
    variable that does not pickle and its type (:func:`find_unpicklable`).
    """
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as exc:  # report whatever pickling raised
        culprit = find_unpicklable(obj, cloudpickle.dumps)
        where = f": it captures {culprit}, which cannot be pickled" if culprit else ""
        raise ConfigurationError(
            f"sink '{sink}': the {what} {describe_callable(obj)} is not picklable{where} "
            f"({type(exc).__name__}: {exc}). Resolvers and serializers run on the Flink workers; "
            "create clients and connections inside them lazily instead of capturing them."
        ) from exc


#: How deep :func:`find_unpicklable` follows captured values, and how many items of a container
#: it tries.
_SEARCH_DEPTH = 8
_SEARCH_ITEMS = 100


def find_unpicklable(obj: Any, dumps: Callable[[Any], Any]) -> str | None:
    """The captured value of ``obj`` that ``dumps`` fails on, described for a user, or None.

    Follows what pickling a function by value takes along: the globals its code (nested
    functions and lambdas included) reads, its closure variables and its default values; the
    function of a bound method, a ``functools.partial`` or a :class:`RecordOnly`; an object's
    attributes (``__dict__`` and ``__slots__``) and its class's methods; the items of a list,
    tuple, set or dict. The package's own wrappers are looked through. Each step of the path to
    the value names the variable and its type, e.g. ``global variable 'sock' (socket.socket)
    used by __main__.to_row``; steps are joined by ``->``.
    """
    path = _unpicklable_path(obj, dumps, 0, set())
    return " -> ".join(path) if path else None


def _type_name(value: Any) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def _pickles(value: Any, dumps: Callable[[Any], Any]) -> bool:
    try:
        dumps(value)
    except Exception:  # noqa: BLE001 - any failure is the one being looked for
        return False
    return True


def _unpicklable_path(
    obj: Any, dumps: Callable[[Any], Any], depth: int, seen: set[int]
) -> list[str]:
    if depth > _SEARCH_DEPTH or id(obj) in seen:
        return []
    seen.add(id(obj))
    for label, where, value in _captured(obj):
        if _pickles(value, dumps):
            continue
        inner = _unpicklable_path(value, dumps, depth + 1, seen)
        if label is None:  # looked through: the path goes on inside it
            if inner:
                return inner
            continue
        step = f"{label} ({_type_name(value)})" + (f" {where}" if where else "")
        return [step, *inner]
    return []


def _global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the functions defined inside it may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


#: What :func:`_captured` yields: a label (None: looked through), where it is, the value.
_Captured = tuple[str | None, str | None, Any]


def _captured(obj: Any) -> list[_Captured]:
    """The values pickling ``obj`` takes along, each with how a user would name it."""
    if isinstance(obj, RecordOnly):
        return [(None, None, obj.fn)]
    if isinstance(obj, functools.partial):
        return [
            (None, None, obj.func),
            *((f"argument {i}", "of a functools.partial", v) for i, v in enumerate(obj.args)),
            *((f"argument {k!r}", "of a functools.partial", v) for k, v in obj.keywords.items()),
        ]
    if isinstance(obj, types.MethodType):
        return [(None, None, obj.__self__), (None, None, obj.__func__)]
    if isinstance(obj, types.FunctionType):
        return _function_captures(obj)
    if isinstance(obj, dict):
        return [(f"item {k!r}", None, v) for k, v in list(obj.items())[:_SEARCH_ITEMS]]
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"item {i}", None, v) for i, v in enumerate(list(obj)[:_SEARCH_ITEMS])]
    if isinstance(obj, type):
        return _class_captures(obj)
    return _object_captures(obj)


def _function_captures(fn: types.FunctionType) -> list[_Captured]:
    code = fn.__code__
    owner = describe_callable(fn)
    out: list[_Captured] = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            out.append((f"closure variable {name!r}", f"of {owner}", cell.cell_contents))
        except ValueError:  # a cell not filled yet
            continue
    scope = fn.__globals__
    out += [
        (f"global variable {name!r}", f"used by {owner}", scope[name])
        for name in sorted(_global_names(code))
        if name in scope
    ]
    defaults = fn.__defaults__ or ()
    if defaults:
        positional = code.co_varnames[: code.co_argcount]
        names = positional[len(positional) - len(defaults) :]
        out += [
            (f"default of parameter {n!r}", f"of {owner}", v)
            for n, v in zip(names, defaults, strict=False)
        ]
    out += [
        (f"default of parameter {n!r}", f"of {owner}", v)
        for n, v in (fn.__kwdefaults__ or {}).items()
    ]
    return out


def _class_captures(cls: type) -> list[_Captured]:
    """A class pickled by value (defined in ``__main__``) takes its methods and attributes."""
    out: list[_Captured] = []
    for name, member in vars(cls).items():
        if name.startswith("__") and name.endswith("__"):
            continue
        if isinstance(member, staticmethod | classmethod):
            out.append((None, None, member.__func__))
        elif isinstance(member, property):
            out += [(None, None, f) for f in (member.fget, member.fset, member.fdel) if f]
        elif isinstance(member, types.FunctionType):
            out.append((None, None, member))
        else:
            out.append((f"class attribute {name!r}", f"of {describe_callable(cls)}", member))
    return out


def _object_captures(obj: Any) -> list[_Captured]:
    kind = type(obj)
    # The package's own wrappers (a serializer built by of(), say) are looked through: their
    # attributes are no names the user wrote.
    own = kind.__module__.split(".")[0] == __name__.split(".")[0]
    attributes: dict[str, Any] = dict(getattr(obj, "__dict__", None) or {})
    for klass in kind.__mro__:
        slots = vars(klass).get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and slot not in attributes:
                try:
                    attributes[slot] = getattr(obj, slot)
                except AttributeError:
                    continue
    owner = f"of {_type_name(obj)}"
    out: list[_Captured] = [
        (None if own else f"attribute {name!r}", owner, value) for name, value in attributes.items()
    ]
    out.append((None, None, kind))
    return out
