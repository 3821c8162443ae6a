"""Turning a record into a Cloud Tasks HTTP task: URL, method, headers, body, name, schedule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from google.cloud import tasks_v2

from pyflink_gcp.core.errors import ConfigurationError, SerializerError
from pyflink_gcp.core.functions import describe_callable, short_repr, with_context

# The raw protobuf classes: building these directly skips the proto-plus wrappers' per-field
# conversion, and the writer sends them without conversion.
TaskPb: Any = tasks_v2.Task.pb()
HttpRequestPb: Any = tasks_v2.HttpRequest.pb()

_METHODS = {
    name: int(member)
    for name, member in tasks_v2.HttpMethod.__members__.items()
    if name != "HTTP_METHOD_UNSPECIFIED"
}

#: A user function of the schema: ``fn(record, context)``, or ``fn(record)``.
RecordFn = Callable[[Any, Any], Any] | Callable[[Any], Any]
UrlSpec = str | RecordFn
HeadersSpec = Mapping[str, str] | RecordFn


class CloudTasksSerializationSchema:
    """Builds the HTTP task of a record.

    Start from :meth:`http_target` and add what the task needs; every ``with_*`` returns a new
    schema. Every function is called as ``fn(record, ctx)`` (the
    :class:`~pyflink_gcp.core.types.WriterContext`), like the resolver; one that takes only the
    record works too (told apart once, when the schema is built). They run on the writer's hot
    path, so keep them cheap.

    - ``http_target(url)``: the target URL, fixed or ``fn(record, ctx) -> str`` (``http://`` or
      ``https://``).
    - ``with_body(fn, content_type=None)``: ``fn(record, ctx) -> bytes | str | None`` (a str is
      sent as UTF-8; None sends no body). ``content_type`` sets the Content-Type header.
    - ``with_headers(fn_or_dict)``: extra headers, fixed or ``fn(record, ctx) -> dict[str, str]``.
    - ``with_http_method(method)``: ``"POST"`` (default), ``"PUT"``, ``"GET"`` ... or a
      ``tasks_v2.HttpMethod``.
    - ``with_task_id(fn)``: ``fn(record, ctx) -> str`` (or int), the task's id within its queue:
      letters, digits, ``-`` and ``_``, at most 500 characters. A replayed record then maps to
      the same task name, and the service answers ALREADY_EXISTS instead of creating a second
      task (the sink counts that as success). Without it, a replay after a failure can create
      duplicate tasks. Prefer ids that do not grow sequentially (hash them): the service
      spreads task names by prefix.
    - ``with_schedule_time(fn)``: ``fn(record, ctx) -> datetime | int | None``, when to dispatch
      (an aware datetime, a naive one taken as UTC, or epoch milliseconds; None: now).

    The serialized form handed to the writer is a ``google.cloud.tasks_v2`` ``Task`` protobuf
    whose name, if any, is the bare task id; the writer completes it with the queue's name.

    Example::

        CloudTasksSerializationSchema.http_target("https://hooks.example.com/orders")
            .with_body(lambda e: json.dumps(e).encode(), content_type="application/json")
            .with_headers(lambda e: {"X-Customer": str(e["customer_id"])})
            .with_task_id(lambda e: e["event_id"])
    """

    __slots__ = (
        "_url",
        "_method",
        "_body",
        "_content_type",
        "_headers",
        "_task_id",
        "_schedule",
        "_prototype",
    )

    def __init__(
        self,
        url: UrlSpec,
        method: int = _METHODS["POST"],
        body: RecordFn | None = None,
        content_type: str | None = None,
        headers: HeadersSpec | None = None,
        task_id: RecordFn | None = None,
        schedule: RecordFn | None = None,
    ) -> None:
        if isinstance(url, str):
            _check_url(url)
        elif not callable(url):
            raise ConfigurationError(
                "CloudTasksSerializationSchema.http_target() takes a URL string or a callable "
                f"(record, ctx) -> str, got {type(url).__name__}"
            )
        else:
            url = with_context(url, "URL function")
        if headers is not None and not callable(headers):
            if not isinstance(headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
            ):
                raise ConfigurationError(
                    "with_headers() takes a dict[str, str] or a callable (record, ctx), "
                    f"got {short_repr(headers)}"
                )
            headers = dict(headers)
        elif headers is not None:
            headers = with_context(headers, "headers function")
        self._url = url
        self._method = method
        self._body = None if body is None else with_context(body, "body function")
        self._content_type = content_type
        self._headers = headers
        self._task_id = None if task_id is None else with_context(task_id, "task id function")
        self._schedule = (
            None if schedule is None else with_context(schedule, "schedule time function")
        )
        self._prototype = self._encode_prototype()

    def _encode_prototype(self) -> bytes:
        """The encoded task of what is the same for every record (fixed URL, method, fixed
        headers): parsing it is the cheapest way to start a record's task (cheaper than
        building the messages field by field), and bytes travel to the workers by pickle."""
        http = HttpRequestPb(http_method=self._method)
        if type(self._url) is str:
            http.url = self._url
        if self._content_type is not None:
            http.headers["Content-Type"] = self._content_type
        if type(self._headers) is dict:
            http.headers.update(self._headers)
        return TaskPb(http_request=http).SerializeToString()

    # -- building ------------------------------------------------------------------------------

    @staticmethod
    def http_target(url: UrlSpec) -> CloudTasksSerializationSchema:
        """HTTP tasks sent to ``url`` (a fixed URL, or ``fn(record, ctx) -> str``)."""
        return CloudTasksSerializationSchema(url)

    def _copy(self, **changes: Any) -> CloudTasksSerializationSchema:
        fields: dict[str, Any] = {
            "url": self._url,
            "method": self._method,
            "body": self._body,
            "content_type": self._content_type,
            "headers": self._headers,
            "task_id": self._task_id,
            "schedule": self._schedule,
        }
        fields.update(changes)
        return CloudTasksSerializationSchema(**fields)

    def with_body(
        self, fn: RecordFn, content_type: str | None = None
    ) -> CloudTasksSerializationSchema:
        """Send ``fn(record, ctx)`` (bytes, str or None) as the body, optionally with a
        Content-Type header."""
        return self._copy(body=fn, content_type=content_type)

    def with_headers(self, headers: HeadersSpec) -> CloudTasksSerializationSchema:
        """Send these headers (a fixed dict, or ``fn(record, ctx) -> dict[str, str]``)."""
        return self._copy(headers=headers)

    def with_http_method(self, method: str | int) -> CloudTasksSerializationSchema:
        """``"POST"`` (the default), ``"GET"``, ``"PUT"``, ``"PATCH"``, ``"DELETE"`` ..."""
        if isinstance(method, str):
            code = _METHODS.get(method.upper())
            if code is None:
                raise ConfigurationError(
                    f"unknown HTTP method {method!r}; choose from {sorted(_METHODS)}"
                )
        elif int(method) in _METHODS.values():
            code = int(method)
        else:
            raise ConfigurationError(f"unknown HTTP method {method!r}")
        return self._copy(method=code)

    def with_task_id(self, fn: RecordFn) -> CloudTasksSerializationSchema:
        """Name each task ``fn(record, ctx)`` (str or int) within its queue (idempotent
        replays)."""
        return self._copy(task_id=fn)

    def with_schedule_time(self, fn: RecordFn) -> CloudTasksSerializationSchema:
        """Dispatch each task at ``fn(record, ctx)`` (datetime or epoch milliseconds; None:
        now)."""
        return self._copy(schedule=fn)

    @property
    def has_task_id(self) -> bool:
        return self._task_id is not None

    # -- the hot path ----------------------------------------------------------------------------

    def serialize(self, record: Any, context: Any = None) -> Any:
        """The ``Task`` protobuf of ``record`` (its name, if any, is the bare task id)."""
        task = TaskPb.FromString(self._prototype)
        http = task.http_request
        if type(self._url) is not str:
            http.url = self._call_url(record, context)
        if self._body is not None:
            body = self._body(record, context)
            if body is not None:
                if type(body) is not bytes:
                    body = self._coerce_body(body, record)
                http.body = body
        spec = self._headers
        if spec is not None and type(spec) is not dict:
            headers = spec(record, context)  # type: ignore[operator]
            if headers:
                try:
                    http.headers.update(headers)
                except (TypeError, ValueError) as exc:
                    raise SerializerError(
                        f"headers function {describe_callable(self._headers)} returned "
                        f"{short_repr(headers)} for record {short_repr(record)}; expected a "
                        "dict[str, str]"
                    ) from exc
        if self._task_id is not None:
            task_id = self._task_id(record, context)
            if task_id is not None:
                if type(task_id) is not str:
                    task_id = self._coerce_task_id(task_id, record)
                task.name = task_id
        if self._schedule is not None:
            when = self._schedule(record, context)
            if when is not None:
                self._set_schedule(task, when, record)
        return task

    def _call_url(self, record: Any, context: Any) -> str:
        url = self._url(record, context)  # type: ignore[operator]
        if type(url) is not str:
            raise SerializerError(
                f"URL function {describe_callable(self._url)} returned {type(url).__name__} "
                f"for record {short_repr(record)}; expected str"
            )
        return url

    def _coerce_body(self, body: Any, record: Any) -> bytes:
        if isinstance(body, str):
            return body.encode("utf-8")
        if isinstance(body, bytes | bytearray | memoryview):
            return bytes(body)
        raise SerializerError(
            f"body function {describe_callable(self._body)} returned {type(body).__name__} for "
            f"record {short_repr(record)}; expected bytes or str"
        )

    def _coerce_task_id(self, task_id: Any, record: Any) -> str:
        if isinstance(task_id, int) and not isinstance(task_id, bool):
            return str(task_id)
        raise SerializerError(
            f"task id function {describe_callable(self._task_id)} returned "
            f"{type(task_id).__name__} for record {short_repr(record)}; expected str"
        )

    def _set_schedule(self, task: Any, when: Any, record: Any) -> None:
        if isinstance(when, datetime):
            task.schedule_time.FromDatetime(when)
        elif isinstance(when, int) and not isinstance(when, bool):
            task.schedule_time.FromMilliseconds(when)
        else:
            raise SerializerError(
                f"schedule time function {describe_callable(self._schedule)} returned "
                f"{type(when).__name__} for record {short_repr(record)}; expected a datetime "
                "or epoch milliseconds (int)"
            )

    def __repr__(self) -> str:
        url = self._url if isinstance(self._url, str) else describe_callable(self._url)
        parts = [f"http_target({url!r})"]
        method = next(name for name, code in _METHODS.items() if code == self._method)
        if method != "POST":
            parts.append(f"with_http_method({method!r})")
        for label, fn in (
            ("with_body", self._body),
            ("with_headers", self._headers),
            ("with_task_id", self._task_id),
            ("with_schedule_time", self._schedule),
        ):
            if fn is not None:
                parts.append(f"{label}({describe_callable(fn)})")
        return "CloudTasksSerializationSchema." + ".".join(parts)


def _check_url(url: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"a Cloud Tasks HTTP target URL must start with http:// or https://: {url!r}"
        )
