"""Turning a record into a Pub/Sub message: payload, ordering key, attributes, provenance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError, SerializerError
from pyflink_gcp.core.functions import describe_callable, short_repr, with_context
from pyflink_gcp.pubsub.attributes import (
    DEFAULT_EVENT_TIME_ATTRIBUTE,
    DEFAULT_RECORD_ID_ATTRIBUTE,
    check_attribute_name,
)


class PubSubSerializationSchema:
    """Builds the message of a record from up to three functions of the record.

    ``payload`` returns the message data (bytes; a str is encoded as UTF-8) or None to skip the
    record. ``with_ordering_key`` returns the ordering key (only sent when the publisher enables
    message ordering; None or "" sends none). ``with_attributes`` returns a ``dict[str, str]``.

    Each function is called as ``(record, ctx)`` with the
    :class:`~pyflink_gcp.core.types.WriterContext`, like the resolver; a function of the record
    alone works too (decided once, when the schema is built, so the hot path inspects nothing).

    Two provenance attributes can be added (opt-in, see :mod:`pyflink_gcp.pubsub.attributes`):
    ``with_event_time_attribute`` (the record's Flink timestamp, epoch milliseconds) and
    ``with_record_id_attribute`` (an id stable across replays, for subscribers that
    de-duplicate). An attributes function returning one of their names fails the job
    (:class:`~pyflink_gcp.core.errors.SerializerError`): one of the two must be renamed.

    The serialized form handed to the writer is a ``(data, ordering_key, attributes)`` tuple: the
    protobuf message is built in the writer, once per record, on the hot path. The writer adds
    a digest record id (it covers the topic) and checks Pub/Sub's attribute limits.

    Example::

        PubSubSerializationSchema.payload(lambda e, ctx: json.dumps(e).encode())
            .with_ordering_key(lambda e, ctx: e["customer_id"])
            .with_attributes(lambda e: {"type": e["type"]})
            .with_event_time_attribute()
            .with_record_id_attribute(key=lambda e: e["order_id"])
    """

    __slots__ = (
        "_payload",
        "_ordering_key",
        "_attributes",
        "_event_time",
        "_record_id",
        "_record_key",
    )

    def __init__(
        self,
        payload: Callable[..., bytes | str | None],
        ordering_key: Callable[..., str | None] | None = None,
        attributes: Callable[..., dict[str, str] | None] | None = None,
        *,
        event_time_attribute: str | None = None,
        record_id_attribute: str | None = None,
        record_id_key: Callable[..., Any] | None = None,
    ) -> None:
        self._payload = with_context(payload, "payload function")
        self._ordering_key = (
            None if ordering_key is None else with_context(ordering_key, "ordering key function")
        )
        self._attributes = (
            None if attributes is None else with_context(attributes, "attributes function")
        )
        if event_time_attribute is not None:
            check_attribute_name("with_event_time_attribute()", event_time_attribute)
        if record_id_attribute is not None:
            check_attribute_name("with_record_id_attribute()", record_id_attribute)
            if record_id_attribute == event_time_attribute:
                raise ConfigurationError(
                    f"with_record_id_attribute(): {record_id_attribute!r} already names the "
                    "event-time attribute; give the two attributes different names"
                )
        elif record_id_key is not None:
            raise ConfigurationError("a record id key needs a record id attribute name")
        self._event_time = event_time_attribute
        self._record_id = record_id_attribute
        self._record_key = (
            None if record_id_key is None else with_context(record_id_key, "record id function")
        )

    def _replace(self, **changes: Any) -> PubSubSerializationSchema:
        values: dict[str, Any] = {
            "payload": self._payload,
            "ordering_key": self._ordering_key,
            "attributes": self._attributes,
            "event_time_attribute": self._event_time,
            "record_id_attribute": self._record_id,
            "record_id_key": self._record_key,
        }
        values.update(changes)
        return PubSubSerializationSchema(**values)

    @staticmethod
    def payload(fn: Callable[..., bytes | str | None]) -> PubSubSerializationSchema:
        """Messages whose data is ``fn(record, ctx)`` (or ``fn(record)``)."""
        return PubSubSerializationSchema(fn)

    def with_ordering_key(self, fn: Callable[..., str | None]) -> PubSubSerializationSchema:
        """Also set the ordering key to ``fn(record, ctx)`` (or ``fn(record)``)."""
        return self._replace(ordering_key=fn)

    def with_attributes(
        self, fn: Callable[..., dict[str, str] | None]
    ) -> PubSubSerializationSchema:
        """Also set the attributes to ``fn(record, ctx)`` (or ``fn(record)``)."""
        return self._replace(attributes=fn)

    def with_event_time_attribute(
        self, name: str = DEFAULT_EVENT_TIME_ATTRIBUTE
    ) -> PubSubSerializationSchema:
        """Also send the record's event time (its Flink timestamp) as attribute ``name``.

        The value is epoch milliseconds in decimal (``"1714557600000"``), the form Apache
        Beam's ``PubsubIO.withTimestampAttribute`` reads. A record without a timestamp (no
        timestamp assigner upstream) is sent without the attribute.
        """
        return self._replace(event_time_attribute=name)

    def with_record_id_attribute(
        self, name: str = DEFAULT_RECORD_ID_ATTRIBUTE, key: Callable[..., Any] | None = None
    ) -> PubSubSerializationSchema:
        """Also send a record id, stable across replays, as attribute ``name``.

        With ``key``, the id is ``str(key(record, ctx))`` (or ``key(record)``): the record's own
        business id, the best choice where records have one. It must not be None or empty.
        Without, it is :func:`~pyflink_gcp.pubsub.attributes.record_digest`: a digest of the
        message as published (data, ordering key, attributes) and its topic, added by the
        writer. Either is computed from the record alone, so a record replayed after a failover
        gets the id of its first publication and a subscriber can drop the duplicate (Apache
        Beam's ``PubsubIO.withIdAttribute``, or a lookup of the ids already seen). A digest
        cannot tell two records with identical messages apart: a de-duplicating subscriber
        keeps one of them.
        """
        return self._replace(record_id_attribute=name, record_id_key=key)

    @property
    def has_ordering_key(self) -> bool:
        """Whether the schema sets ordering keys (refused at ``build()`` without ordering)."""
        return self._ordering_key is not None

    @property
    def record_id_digest(self) -> str | None:
        """The attribute the writer puts the digest record id in, or None (no record id, or
        one from a key function, which the schema sets itself)."""
        return self._record_id if self._record_key is None else None

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
        if self._event_time is not None or self._record_id is not None:
            attributes = self._provenance(record, context, attributes)
        return data, key, attributes

    def _provenance(
        self, record: Any, context: Any, attributes: dict[str, str] | None
    ) -> dict[str, str] | None:
        """``attributes`` with the event time and the record id from a key function."""
        out = dict(attributes) if attributes else {}
        for name in (self._event_time, self._record_id):
            if name is not None and name in out:
                raise SerializerError(
                    f"attributes function {describe_callable(self._attributes)} returned "
                    f"attribute {name!r}, which the schema sets itself "
                    f"(with_event_time_attribute or with_record_id_attribute), for record "
                    f"{short_repr(record)}; rename one of them"
                )
        if self._event_time is not None:
            timestamp = getattr(context, "timestamp", None)
            if timestamp is not None:
                out[self._event_time] = str(timestamp)
        if self._record_key is not None and self._record_id is not None:
            record_id = self._record_key(record, context)
            if record_id is None or record_id == "":
                raise SerializerError(
                    f"record id function {describe_callable(self._record_key)} returned "
                    f"{record_id!r} for record {short_repr(record)}; every record needs an id"
                )
            out[self._record_id] = record_id if type(record_id) is str else str(record_id)
        return out or None

    def __repr__(self) -> str:
        parts = [f"payload({describe_callable(self._payload)})"]
        if self._ordering_key is not None:
            parts.append(f"with_ordering_key({describe_callable(self._ordering_key)})")
        if self._attributes is not None:
            parts.append(f"with_attributes({describe_callable(self._attributes)})")
        if self._event_time is not None:
            parts.append(f"with_event_time_attribute({self._event_time!r})")
        if self._record_id is not None:
            key = "" if self._record_key is None else f", key={describe_callable(self._record_key)}"
            parts.append(f"with_record_id_attribute({self._record_id!r}{key})")
        return "PubSubSerializationSchema." + ".".join(parts)
