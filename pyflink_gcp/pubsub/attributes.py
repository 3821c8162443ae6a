"""Message attributes: Pub/Sub's limits on them, and the provenance attributes the sink can add.

Limits (https://cloud.google.com/pubsub/quotas#resource_limits): at most
:data:`~pyflink_gcp.pubsub.options.MAX_ATTRIBUTES` attributes per message, keys of at most
:data:`~pyflink_gcp.pubsub.options.MAX_ATTRIBUTE_KEY_BYTES` bytes and values of at most
:data:`~pyflink_gcp.pubsub.options.MAX_ATTRIBUTE_VALUE_BYTES` bytes (UTF-8). The service rejects
a request holding one message over them, so the writer checks every message when it is built
(:func:`attribute_violation`) and hands one that breaks them to the failure handler, alone,
instead of sending it.

Provenance attributes (opt-in, set on the
:class:`~pyflink_gcp.pubsub.serialization.PubSubSerializationSchema`):

- the record's event time, as epoch milliseconds in decimal (the Flink timestamp of the record;
  none for a record without one);
- a record id for subscribers that de-duplicate: a function of the record the user names, or
  :func:`record_digest`, a digest of the message as published and its topic. Both are
  computed from the record alone, never from the clock, the subtask or the record's position
  in the stream, so a record replayed after a failover gets the id it had the first time.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.pubsub.options import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
)

#: The default name of the event-time attribute.
DEFAULT_EVENT_TIME_ATTRIBUTE = "event-time"
#: The default name of the record-id attribute.
DEFAULT_RECORD_ID_ATTRIBUTE = "record-id"

# A str of n characters is at most 4n bytes in UTF-8: shorter ones need no encoding to check.
_KEY_CHARS_SAFE = MAX_ATTRIBUTE_KEY_BYTES // 4
_VALUE_CHARS_SAFE = MAX_ATTRIBUTE_VALUE_BYTES // 4


def attribute_violation(attributes: dict[str, str]) -> str | None:
    """Why ``attributes`` break Pub/Sub's limits (the first limit broken), or None.

    Raises:
        TypeError: A key or a value is not a str (a bug of the attributes function, not of
            the record).
    """
    if len(attributes) > MAX_ATTRIBUTES:
        return (
            f"the message has {len(attributes):,} attributes, over Pub/Sub's limit of "
            f"{MAX_ATTRIBUTES} attributes per message"
        )
    for key, value in attributes.items():
        if type(key) is not str or type(value) is not str:
            what = "key" if type(key) is not str else "value"
            bad = key if what == "key" else value
            raise TypeError(
                f"attribute {short_repr(key)} has a {type(bad).__name__} {what}; attribute "
                "keys and values must be str"
            )
        if len(key) > _KEY_CHARS_SAFE:
            size = len(key.encode("utf-8"))
            if size > MAX_ATTRIBUTE_KEY_BYTES:
                return (
                    f"attribute key {short_repr(key)} is {size:,} bytes, over Pub/Sub's limit "
                    f"of {MAX_ATTRIBUTE_KEY_BYTES} bytes per attribute key"
                )
        if len(value) > _VALUE_CHARS_SAFE:
            size = len(value.encode("utf-8"))
            if size > MAX_ATTRIBUTE_VALUE_BYTES:
                return (
                    f"attribute {short_repr(key)} has a value of {size:,} bytes, over "
                    f"Pub/Sub's limit of {MAX_ATTRIBUTE_VALUE_BYTES:,} bytes per attribute value"
                )
    return None


def check_attribute_name(owner: str, name: object) -> str:
    """``name`` if it can name an attribute (a non-empty str within the key limit).

    Raises:
        ConfigurationError: It cannot, naming ``owner`` (the setter) and the value.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{owner} takes a non-empty attribute name, got {name!r}")
    if len(name.encode("utf-8")) > MAX_ATTRIBUTE_KEY_BYTES:
        raise ConfigurationError(
            f"{owner}: attribute name {short_repr(name)} is over Pub/Sub's limit of "
            f"{MAX_ATTRIBUTE_KEY_BYTES} bytes per attribute key"
        )
    return name


def _feed(digest: Any, part: bytes) -> None:
    digest.update(len(part).to_bytes(8, "big"))
    digest.update(part)


def record_digest(topic: str, data: bytes, ordering_key: str, attributes: dict[str, str]) -> str:
    """A record id derived from the message as published: 32 hex digits (BLAKE2b, 128 bits).

    It covers the topic's resource name, the data, the ordering key and every attribute (the
    event-time attribute included, when the schema adds it), each length-prefixed so no two
    different messages share an encoding. Replaying a record after a failover rebuilds the
    same message, hence the same id, as long as the serializer's functions are deterministic.

    Its limit: two records whose messages are identical, to the same topic, get the same id,
    and a subscriber that de-duplicates keeps one of them. Where such records are distinct
    events, name a key instead (``with_record_id_attribute(key=...)``), or put what tells them
    apart (the event time, a sequence number) into the message.
    """
    digest = hashlib.blake2b(digest_size=16)
    _feed(digest, topic.encode("utf-8"))
    _feed(digest, data)
    _feed(digest, ordering_key.encode("utf-8"))
    for key in sorted(attributes):
        _feed(digest, key.encode("utf-8"))
        _feed(digest, attributes[key].encode("utf-8"))
    return digest.hexdigest()
