"""The per-service naming rules: what sanitize() keeps and replaces, what validate() refuses, and
that each is the rule its service's destination type validates with."""

from __future__ import annotations

import importlib
import pickle
import re

import cloudpickle
import pytest

from pyflink_gcp.bigquery import TableDestination as BigQueryTable
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.cloudtasks import QueueDestination
from pyflink_gcp.pubsub import TopicDestination
from pyflink_gcp.routing import names
from pyflink_gcp.routing.names import NameRule

ALL_RULES = [
    names.bigquery_table_id,
    names.pubsub_topic_id,
    names.cloudtasks_queue_id,
    names.bigtable_table_id,
    names.spanner_table_name,
]


# --- sanitize -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        (names.bigquery_table_id, "acme/eu 2024:01", "acme_eu_2024_01"),
        (names.bigquery_table_id, "Acme-EU_1", "Acme-EU_1"),
        (names.bigquery_table_id, "étudiant", "_tudiant"),
        (names.bigquery_table_id, "a.b$c", "a_b_c"),
        (names.pubsub_topic_id, "a b/c~d+e%f.g-h_i", "a_b_c~d+e%f.g-h_i"),
        (names.pubsub_topic_id, "ünïcode", "_n_code"),
        (names.cloudtasks_queue_id, "a_b.c d", "a-b-c-d"),
        (names.cloudtasks_queue_id, "Queue-1", "Queue-1"),
        (names.bigtable_table_id, "a-b_c.d/e:f", "a-b_c.d_e_f"),
        (names.spanner_table_name, "Orders-2024.eu", "Orders_2024_eu"),
    ],
)
def test_sanitize_replaces_only_characters_the_service_does_not_allow(rule, value, expected):
    assert rule.sanitize(value) == expected


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.label)
def test_sanitize_keeps_case_and_length(rule):
    value = "MixedCase/Value é"
    sanitized = rule.sanitize(value)
    assert len(sanitized) == len(value)
    assert sanitized.startswith("MixedCase")
    assert rule.sanitize(sanitized) == sanitized  # idempotent


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.label)
def test_sanitize_returns_a_valid_value_unchanged_and_the_empty_string_as_is(rule):
    value = "abc123"
    assert rule.sanitize(value) is value
    assert rule.sanitize("") == ""


def test_sanitize_uses_the_service_separator():
    assert names.bigquery_table_id.replacement == "_"
    assert names.pubsub_topic_id.replacement == "_"
    assert names.cloudtasks_queue_id.replacement == "-"  # Cloud Tasks allows no underscores
    assert names.bigtable_table_id.replacement == "_"
    assert names.spanner_table_name.replacement == "_"


# --- validate -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "name"),
    [
        (names.bigquery_table_id, "orders_acme_20240501"),
        (names.bigquery_table_id, "x"),
        (names.bigquery_table_id, "table 01"),  # the examples of BigQuery's docs
        (names.bigquery_table_id, "ग्राहक"),
        (names.bigquery_table_id, "00_お客様"),
        (names.bigquery_table_id, "étudiant-01"),
        (names.bigquery_table_id, "t" * 1024),
        (names.pubsub_topic_id, "abc"),
        (names.pubsub_topic_id, "Events-eu.v1~x+y%z_w"),
        (names.pubsub_topic_id, "a" * 255),
        (names.pubsub_topic_id, "Goog-is-case-sensitive"),
        (names.cloudtasks_queue_id, "q"),
        (names.cloudtasks_queue_id, "webhooks-3"),
        (names.cloudtasks_queue_id, "1-" + "q" * 98),
        (names.bigtable_table_id, "_t"),
        (names.bigtable_table_id, "9table.v-1"),
        (names.bigtable_table_id, "t" * 50),
        (names.spanner_table_name, "O"),
        (names.spanner_table_name, "Orders_2024"),
        (names.spanner_table_name, "S" * 128),
    ],
)
def test_validate_accepts_valid_names(rule, name):
    assert rule.validate(name) is None


@pytest.mark.parametrize(
    ("rule", "name", "reason"),
    [
        (
            names.bigquery_table_id,
            "",
            "is empty; a BigQuery table id has 1 to 1024 characters",
        ),
        (
            names.bigquery_table_id,
            "t" * 1025,
            "has 1025 characters; a BigQuery table id has 1 to 1024 characters",
        ),
        (
            names.bigquery_table_id,
            "é" * 600,
            "has 1200 UTF-8 bytes; a BigQuery table id has at most 1024",
        ),
        (
            names.bigquery_table_id,
            "orders$20240501",
            "contains '$' at position 6; a BigQuery table id allows only letters, marks, "
            "numbers, connectors such as '_', dashes and spaces",
        ),
        (
            names.pubsub_topic_id,
            "ab",
            "has 2 characters; a Pub/Sub topic id has 3 to 255 characters",
        ),
        (
            names.pubsub_topic_id,
            "a" * 256,
            "has 256 characters; a Pub/Sub topic id has 3 to 255 characters",
        ),
        (
            names.pubsub_topic_id,
            "9events",
            "starts with '9'; a Pub/Sub topic id starts with a letter",
        ),
        (
            names.pubsub_topic_id,
            "_events",
            "starts with '_'; a Pub/Sub topic id starts with a letter",
        ),
        (
            names.pubsub_topic_id,
            "google-events",
            "starts with 'goog', which a Pub/Sub topic id may not",
        ),
        (
            names.pubsub_topic_id,
            "events/eu",
            "contains '/' at position 6; a Pub/Sub topic id allows only letters, digits, "
            "hyphens, underscores, periods, '~', '+' and '%'",
        ),
        (
            names.cloudtasks_queue_id,
            "a_b",
            "contains '_' at position 1; a Cloud Tasks queue id allows only letters, digits "
            "and hyphens",
        ),
        (
            names.cloudtasks_queue_id,
            "q" * 101,
            "has 101 characters; a Cloud Tasks queue id has 1 to 100 characters",
        ),
        (
            names.bigtable_table_id,
            "-table",
            "starts with '-'; a Bigtable table id starts with a letter, a digit or '_'",
        ),
        (
            names.bigtable_table_id,
            ".table",
            "starts with '.'; a Bigtable table id starts with a letter, a digit or '_'",
        ),
        (
            names.bigtable_table_id,
            "t" * 51,
            "has 51 characters; a Bigtable table id has 1 to 50 characters",
        ),
        (
            names.spanner_table_name,
            "_orders",
            "starts with '_'; a Spanner table name starts with a letter",
        ),
        (
            names.spanner_table_name,
            "orders-eu",
            "contains '-' at position 6; a Spanner table name allows only letters, digits and "
            "underscores",
        ),
        (
            names.spanner_table_name,
            "S" * 129,
            "has 129 characters; a Spanner table name has 1 to 128 characters",
        ),
    ],
)
def test_validate_gives_the_reason(rule, name, reason):
    assert rule.validate(name) == reason


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.label)
def test_a_sanitized_value_of_valid_length_and_start_validates(rule):
    name = "Abc" + rule.sanitize(" weird/väl:ue ")
    assert rule.validate(name) is None


def test_bigquery_validate_accepts_literal_spaces_that_sanitize_replaces():
    assert names.bigquery_table_id.validate("daily orders") is None
    assert names.bigquery_table_id.sanitize("daily orders") == "daily_orders"


# --- check_literal --------------------------------------------------------------------------


def test_check_literal_finds_a_character_never_allowed():
    problem = names.bigquery_table_id.check_literal("orders:", at_start=True)
    assert problem is not None
    assert problem[0] == 6
    assert problem[1].startswith("':' is not allowed; a BigQuery table id allows only")


def test_check_literal_applies_the_start_rules_only_at_the_start():
    assert names.pubsub_topic_id.check_literal("1-", at_start=True) == (
        0,
        "starts with '1'; a Pub/Sub topic id starts with a letter",
    )
    assert names.pubsub_topic_id.check_literal("1-", at_start=False) is None
    assert names.pubsub_topic_id.check_literal("goog-", at_start=True) == (
        0,
        "starts with 'goog', which a Pub/Sub topic id may not",
    )
    assert names.pubsub_topic_id.check_literal("", at_start=True) is None


def test_check_literal_ignores_lengths():
    assert names.pubsub_topic_id.check_literal("e", at_start=True) is None


# --- the rule value -------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.label)
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_rules_pickle_by_value(rule, dumps):
    copy = pickle.loads(dumps(rule))
    assert copy == rule
    assert hash(copy) == hash(rule)
    assert copy.sanitize("a/b") == rule.sanitize("a/b")
    assert copy.validate("") == rule.validate("")


def test_rules_are_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        names.bigquery_table_id.max_length = 5  # type: ignore[misc]


def test_rules_compare_by_settings():
    one = NameRule("x id", allowed="-", replacement="-", min_length=1, max_length=10)
    two = NameRule("x id", allowed="-", replacement="-", min_length=1, max_length=10)
    other = NameRule("x id", allowed="-", replacement="-", min_length=1, max_length=11)
    assert one == two and hash(one) == hash(two)
    assert one != other
    assert repr(one) == "NameRule('x id')"
    assert one != "x id"


def test_a_custom_rule_for_a_postgresql_spanner_table():
    rule = NameRule(
        "Spanner PostgreSQL table name",
        allowed="_",
        replacement="_",
        min_length=1,
        max_length=63,
        first="",
    )
    assert rule.validate("orders") is None
    assert rule.validate("o" * 64) == (
        "has 64 characters; a Spanner PostgreSQL table name has 1 to 63 characters"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replacement": "/"}, "the replacement '/' must be one allowed character"),
        ({"replacement": "__"}, "the replacement '__' must be one allowed character"),
        ({"min_length": 5, "max_length": 4}, "lengths 5-4 are inverted"),
        ({"min_length": 0}, "lengths 0-10 are inverted"),
    ],
)
def test_a_rule_with_impossible_settings_is_refused(kwargs, message):
    settings = {"allowed": "_", "replacement": "_", "min_length": 1, "max_length": 10}
    settings.update(kwargs)
    with pytest.raises(ValueError, match=message):
        NameRule("x id", **settings)


# --- one rule per service -------------------------------------------------------------------

#: The rule routing re-exports: (its name here, the service's module, its name there).
RE_EXPORTS = [
    ("bigquery_table_id", "pyflink_gcp.bigquery.destinations", "TABLE_ID"),
    ("pubsub_topic_id", "pyflink_gcp.pubsub.destinations", "TOPIC_ID"),
    ("cloudtasks_queue_id", "pyflink_gcp.cloudtasks.destinations", "QUEUE_ID"),
    ("bigtable_table_id", "pyflink_gcp.bigtable.destinations", "TABLE_ID"),
    ("spanner_table_name", "pyflink_gcp.spanner.destinations", "TABLE_NAME"),
]


@pytest.mark.parametrize(("name", "module", "attribute"), RE_EXPORTS)
def test_routing_re_exports_the_rule_of_the_services_destinations_module(name, module, attribute):
    assert getattr(names, name) is getattr(importlib.import_module(module), attribute)
    assert name in names.__all__ and name in dir(names)


def test_an_unknown_rule_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'kafka_topic'"):
        names.kafka_topic  # noqa: B018


def _topic(name):
    return TopicDestination.of("p", name)


def _queue(name):
    return QueueDestination.of("p", "l", name)


def _bigtable(name):
    return BigtableTable.of("p", "inst", name)


def _bigquery(name):
    return BigQueryTable.of("p", "d", name)


@pytest.mark.parametrize(
    ("rule", "build", "name"),
    [
        (rule, build, name)
        for rule, build, samples in [
            (names.pubsub_topic_id, _topic, ["abc", "ab", "9ev", "goog-x", "a/b", "Ev.v1~x+y%z"]),
            (names.cloudtasks_queue_id, _queue, ["q", "a_b", "q" * 100, "q" * 101, "Queue-1"]),
            (names.bigtable_table_id, _bigtable, ["_t", "-t", ".t", "9t.v-1", "t" * 51, "a b"]),
            (names.bigquery_table_id, _bigquery, ["orders 2024", "a.b", "é" * 600, "", "t-1"]),
        ]
        for name in samples
    ],
)
def test_the_destination_type_accepts_exactly_what_its_rule_validates(rule, build, name):
    reason = rule.validate(name)
    if reason is None:
        assert str(build(name)).endswith("/" + name)
    else:
        with pytest.raises(ValueError, match=re.escape(reason)):
            build(name)


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        (names.pubsub_topic_id, "9lives", "x9lives"),
        (names.pubsub_topic_id, "_eu", "x_eu"),
        (names.spanner_table_name, "2024", "x2024"),
        (names.bigtable_table_id, ".t", "_.t"),
        (names.bigtable_table_id, "9t", "9t"),
        (names.bigquery_table_id, "9t", "9t"),
        (names.cloudtasks_queue_id, "-9", "-9"),
    ],
)
def test_a_value_starting_the_name_is_prefixed_where_the_service_forbids_its_start(
    rule, value, expected
):
    assert rule.sanitize(value, at_start=True) == expected
    if expected != value:
        assert rule.validate(value) is not None and rule.validate(expected) is None
