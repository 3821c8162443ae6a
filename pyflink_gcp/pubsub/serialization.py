"""Turning a record into a Pub/Sub message: payload, ordering key, attributes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyflink_gcp.core.errors import SerializerError
from pyflink_gcp.core.functions import describe_callable, short_repr, with_context


class PubSubSerializationSchema:
    """Builds the message of a record from up to three functions of the record.

    ``payload`` returns the message data (bytes; a str is encoded as UTF-8) or None to skip the
    record. ``with_ordering_key`` returns the ordering key (only sent when the publisher enables
    message ordering; None or "" sends none). ``with_attributes`` returns a ``dict[str, str]``.

    Each function is called as ``(record, ctx)`` with the
    :class:`~pyflink_gcp.core.types.WriterContext`, like the resolver; a function of the record
    alone works too (decided once, when the schema is built, so the hot path inspects nothing).

    The serialized form handed to the writer is a ``(data, ordering_key, attributes)`` tuple: the
    protobuf message is built in the writer, once per record, on the hot path.

    Example::

        PubSubSerializationSchema.payload(lambda e, ctx: json.dumps(e).encode())
            .with_ordering_key(lambda e, ctx: e["customer_id"])
            .with_attributes(lambda e: {"type": e["type"]})
    """

    __slots__ = ("_payload", "_ordering_key", "_attributes")

    def __init__(
        self,
        payload: Callable[..., bytes | str | None],
        ordering_key: Callable[..., str | None] | None = None,
        attributes: Callable[..., dict[str, str] | None] | None = None,
    ) -> None:
        self._payload = with_context(payload, "payload function")
        self._ordering_key = (
            None if ordering_key is None else with_context(ordering_key, "ordering key function")
        )
        self._attributes = (
            None if attributes is None else with_context(attributes, "attributes function")
        )

    @staticmethod
    def payload(fn: Callable[..., bytes | str | None]) -> PubSubSerializationSchema:
        """Messages whose data is ``fn(record, ctx)`` (or ``fn(record)``)."""
        return PubSubSerializationSchema(fn)

    def with_ordering_key(self, fn: Callable[..., str | None]) -> PubSubSerializationSchema:
        """Also set the ordering key to ``fn(record, ctx)`` (or ``fn(record)``)."""
        return PubSubSerializationSchema(self._payload, fn, self._attributes)

    def with_attributes(
        self, fn: Callable[..., dict[str, str] | None]
    ) -> PubSubSerializationSchema:
        """Also set the attributes to ``fn(record, ctx)`` (or ``fn(record)``)."""
        return PubSubSerializationSchema(self._payload, self._ordering_key, fn)

    @property
    def has_ordering_key(self) -> bool:
        """Whether the schema sets ordering keys (refused at ``build()`` without ordering)."""
        return self._ordering_key is not None

    def serialize(
        self, record: Any, context: Any
    ) -> tuple[bytes, str, dict[str, str] | None] | None:
        """``(data, ordering_key, attributes)`` of ``record``, or None to skip it."""
        data = self._payload(record, context)
        if data is None:
            return None
        if type(data) is not bytes:
            if isinstance(data, str):
                data = data.encode("utf-8")
            elif isinstance(data, bytearray | memoryview):
                data = bytes(data)
            else:
                raise SerializerError(
                    f"payload function {describe_callable(self._payload)} returned "
                    f"{type(data).__name__} for record {short_repr(record)}; expected bytes"
                )
        key = ""
        if self._ordering_key is not None:
            key = self._ordering_key(record, context) or ""
            if type(key) is not str:
                key = str(key)
        attributes = self._attributes(record, context) if self._attributes is not None else None
        return data, key, attributes

    def __repr__(self) -> str:
        parts = [f"payload({describe_callable(self._payload)})"]
        if self._ordering_key is not None:
            parts.append(f"with_ordering_key({describe_callable(self._ordering_key)})")
        if self._attributes is not None:
            parts.append(f"with_attributes({describe_callable(self._attributes)})")
        return "PubSubSerializationSchema." + ".".join(parts)
