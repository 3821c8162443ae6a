"""Attribute limits and the digest record id, without a service."""

from __future__ import annotations

import pytest

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.pubsub.attributes import (
    attribute_violation,
    check_attribute_name,
    record_digest,
)
from pyflink_gcp.pubsub.options import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
)

TOPIC = "projects/p/topics/orders"


def test_attributes_at_every_limit_pass():
    at_limits = {f"k{i}": "v" for i in range(MAX_ATTRIBUTES - 2)}
    at_limits["k" * MAX_ATTRIBUTE_KEY_BYTES] = "v"
    at_limits["big"] = "v" * MAX_ATTRIBUTE_VALUE_BYTES
    assert len(at_limits) == MAX_ATTRIBUTES
    assert attribute_violation(at_limits) is None


def test_one_attribute_too_many_names_the_count_and_the_limit():
    attributes = {f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)}
    assert attribute_violation(attributes) == (
        "the message has 101 attributes, over Pub/Sub's limit of 100 attributes per message"
    )


def test_a_key_over_256_bytes_names_the_key_and_the_limit():
    key = "k" * (MAX_ATTRIBUTE_KEY_BYTES + 1)
    reason = attribute_violation({"ok": "v", key: "v"})
    assert reason is not None
    assert reason.startswith("attribute key 'kkkk")
    assert reason.endswith("is 257 bytes, over Pub/Sub's limit of 256 bytes per attribute key")


def test_a_value_over_1024_bytes_names_the_attribute_and_the_limit():
    assert attribute_violation({"note": "x" * 2_000}) == (
        "attribute 'note' has a value of 2,000 bytes, over Pub/Sub's limit of 1,024 bytes "
        "per attribute value"
    )


def test_limits_count_utf8_bytes_not_characters():
    # 300 characters of 4 bytes each: within 1,024 characters, over 1,024 bytes.
    assert attribute_violation({"emoji": "\U0001f600" * 300}) == (
        "attribute 'emoji' has a value of 1,200 bytes, over Pub/Sub's limit of 1,024 bytes "
        "per attribute value"
    )
    assert attribute_violation({"emoji": "\U0001f600" * 256}) is None
    assert attribute_violation({"\u00e9" * 129: "v"}) is not None  # 258 bytes
    assert attribute_violation({"\u00e9" * 128: "v"}) is None  # 256 bytes


def test_a_non_str_value_is_a_type_error_naming_the_attribute():
    with pytest.raises(TypeError, match="attribute 'n' has a int value; attribute keys"):
        attribute_violation({"n": 1})
    with pytest.raises(TypeError, match="has a int key"):
        attribute_violation({1: "v"})


def test_attribute_names_are_checked_when_configured():
    assert check_attribute_name("setter()", "event-time") == "event-time"
    with pytest.raises(ConfigurationError, match=r"setter\(\) takes a non-empty attribute name"):
        check_attribute_name("setter()", "")
    with pytest.raises(ConfigurationError, match="over Pub/Sub's limit of 256 bytes"):
        check_attribute_name("setter()", "n" * 257)


def test_the_digest_is_stable_and_covers_topic_data_key_and_attributes():
    base = record_digest(TOPIC, b"data", "", {"a": "1", "b": "2"})
    assert len(base) == 32 and int(base, 16) >= 0
    # The same message gives the same id, whatever the order its attributes were built in.
    assert record_digest(TOPIC, b"data", "", {"b": "2", "a": "1"}) == base
    others = {
        record_digest("projects/p/topics/other", b"data", "", {"a": "1", "b": "2"}),
        record_digest(TOPIC, b"datb", "", {"a": "1", "b": "2"}),
        record_digest(TOPIC, b"data", "k", {"a": "1", "b": "2"}),
        record_digest(TOPIC, b"data", "", {"a": "1", "b": "3"}),
        record_digest(TOPIC, b"data", "", {"a": "1"}),
    }
    assert base not in others and len(others) == 5


def test_the_digest_fields_are_length_prefixed_so_boundaries_cannot_shift():
    assert record_digest(TOPIC, b"ab", "c", {}) != record_digest(TOPIC, b"a", "bc", {})
    assert record_digest(TOPIC, b"", "", {"ab": "c"}) != record_digest(TOPIC, b"", "", {"a": "bc"})
