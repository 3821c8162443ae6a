"""Destination-name templates: syntax, field lookup, event and processing time, formatting,
checking and sanitizing by a naming rule, collisions, field checks, pickling."""

from __future__ import annotations

import pickle
import sys
from collections import namedtuple
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import IntEnum

import cloudpickle
import pytest
from pyflink.common.time import Instant
from pyflink.common.types import Row

from pyflink_gcp.core.errors import ConfigurationError, NonRetriableSinkError, SinkError
from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing import (
    NameRule,
    Template,
    TemplateError,
    TemplateValueError,
    _helpers,
    names,
    templates,
)

# 2024-05-01T10:00:00Z
MAY_1 = 1714557600000


def ctx(timestamp: int | None = MAY_1) -> WriterContext:
    return WriterContext(timestamp=timestamp)


# --- parsing --------------------------------------------------------------------------------


def test_the_parsed_template_lists_its_placeholders_in_order():
    t = Template("orders_{tenant}_{event_time:%Y%m%d}_{customer.region}_{tenant}")
    assert t.text == "orders_{tenant}_{event_time:%Y%m%d}_{customer.region}_{tenant}"
    assert t.placeholders == ("tenant", "event_time", "customer.region", "tenant")
    assert t.roots == frozenset({"tenant", "event_time", "customer"})
    assert not t.is_constant


def test_a_template_without_placeholders_is_constant():
    t = Template("orders")
    assert t.is_constant
    assert t.placeholders == ()
    assert t.roots == frozenset()
    assert t.render(object()) == "orders"


def test_doubled_braces_are_literal_braces():
    t = Template("{{a}}_{b}_}}{{")
    assert t.placeholders == ("b",)
    assert t.render({"b": "x"}) == "{a}_x_}{"
    assert Template("{{}}").render({}) == "{}"
    assert Template("{{}}").is_constant


def test_the_spec_is_everything_after_the_first_colon():
    t = Template("{t:%H:%M}")
    assert t.placeholders == ("t",)
    assert t.render({"t": datetime(2024, 5, 1, 10, 30)}) == "10:30"


def test_an_empty_spec_is_no_spec():
    assert Template("{flag:}").render({"flag": True}) == "true"


OPEN = " (write '{{' for a literal brace)"
CLOSE = " (write '}}' for a literal brace)"
NEST = " (placeholders do not nest)"
PATH = " (a path is identifiers [A-Za-z_][A-Za-z0-9_]* joined by '.')"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders_{tenant", "unclosed '{' at position 7" + OPEN),
        ("a_{", "unclosed '{' at position 2" + OPEN),
        ("x_{}", "empty placeholder '{}' at position 2"),
        ("a}b", "single '}' at position 1" + CLOSE),
        ("{a}}", "single '}' at position 3" + CLOSE),
        ("{a:{b}}", "'{' inside a placeholder at position 3" + NEST),
        ("{a{b}", "'{' inside a placeholder at position 2" + NEST),
        ("{:x}", "placeholder without a field name at position 1"),
        ("ab{a..b}", "empty field name in 'a..b' at position 5"),
        ("{a.}", "empty field name in 'a.' at position 3"),
        ("{.a}", "empty field name in '.a' at position 1"),
        ("{1st}", "invalid character '1' in field path '1st' at position 1" + PATH),
        ("t_{ tenant }", "invalid character ' ' in field path ' tenant ' at position 3" + PATH),
        (
            "{customer.re-gion}",
            "invalid character '-' in field path 'customer.re-gion' at position 12" + PATH,
        ),
        ("{ténant}", "invalid character 'é' in field path 'ténant' at position 2" + PATH),
    ],
)
def test_a_syntax_error_names_the_template_and_the_position(text, message):
    with pytest.raises(TemplateError) as err:
        Template(text)
    assert str(err.value) == f"template '{text}': {message}"


def test_identifiers_may_start_with_an_underscore_and_hold_digits():
    assert Template("{_a1.b_2}").render({"_a1": {"b_2": "v"}}) == "v"


def test_a_template_is_a_non_empty_string():
    with pytest.raises(TemplateError, match="cannot be empty"):
        Template("")
    with pytest.raises(TypeError, match="a template is a string, got int"):
        Template(12)  # type: ignore[arg-type]


def test_template_errors_are_configuration_errors_and_value_errors_are_not_sink_errors():
    assert issubclass(TemplateError, ConfigurationError)
    assert issubclass(TemplateError, NonRetriableSinkError)
    assert issubclass(TemplateError, ValueError)
    assert issubclass(TemplateValueError, ValueError)
    assert not issubclass(TemplateValueError, SinkError)


# --- field lookup ---------------------------------------------------------------------------


@dataclass
class Customer:
    region: str
    tier: int


@dataclass
class Order:
    tenant: str
    customer: Customer


Point = namedtuple("Point", ["x", "y"])


def test_nested_fields_on_dicts():
    t = Template("{tenant}_{customer.region}_{customer.address.country}")
    record = {"tenant": "acme", "customer": {"region": "eu", "address": {"country": "de"}}}
    assert t.render(record) == "acme_eu_de"


def test_nested_fields_on_rows():
    t = Template("{tenant}_{customer.region}")
    record = Row(tenant="acme", customer=Row(region="eu", tier=2))
    assert t.render(record) == "acme_eu"


def test_rows_of_a_named_row_type():
    order_type = Row("tenant", "amount")
    assert Template("{tenant}_{amount}").render(order_type("acme", 12)) == "acme_12"


def test_nested_fields_on_objects():
    t = Template("{tenant}_{customer.region}_{customer.tier}")
    assert t.render(Order("acme", Customer("eu", 2))) == "acme_eu_2"
    assert Template("{p.x}-{p.y}").render({"p": Point(1, 2)}) == "1-2"


def test_mixed_nesting():
    record = Row(tenant="acme", customer={"profile": Customer("apac", 1)})
    assert Template("{customer.profile.region}").render(record) == "apac"


def test_a_missing_root_field_names_the_template_placeholder_and_record():
    with pytest.raises(TemplateValueError) as err:
        Template("orders_{tenant}").render({"id": 7})
    assert str(err.value) == (
        "template 'orders_{tenant}': placeholder {tenant}: the record has no field 'tenant'; "
        "record {'id': 7}"
    )


def test_a_missing_nested_field_names_where_it_was_looked_for():
    with pytest.raises(TemplateValueError) as err:
        Template("{customer.address.city}").render({"customer": {"address": {"zip": 1}}})
    assert str(err.value) == (
        "template '{customer.address.city}': placeholder {customer.address.city}: "
        "'customer.address' (dict) has no field 'city'; "
        "record {'customer': {'address': {...}}}"
    )


def test_a_none_on_the_way_is_missing():
    with pytest.raises(
        TemplateValueError, match=r"placeholder \{customer.region\}: 'customer' is None"
    ):
        Template("{customer.region}").render({"customer": None})


def test_a_none_value_is_missing():
    with pytest.raises(TemplateValueError) as err:
        Template("orders_{tenant}").render({"tenant": None})
    assert str(err.value) == (
        "template 'orders_{tenant}': placeholder {tenant}: the value is missing (None); "
        "record {'tenant': None}"
    )


def test_the_record_repr_in_messages_is_short():
    record = {"tenant": None, "payload": "x" * 500}
    with pytest.raises(TemplateValueError) as err:
        Template("{tenant}").render(record)
    assert len(str(err.value)) < 250


def test_methods_of_rows_and_mappings_are_not_fields():
    with pytest.raises(TemplateValueError, match="the record has no field 'as_dict'"):
        Template("{as_dict}").render(Row(tenant="acme"))
    with pytest.raises(TemplateValueError, match="the record has no field 'items'"):
        Template("{items}").render({"tenant": "acme"})


def test_a_row_without_field_names_says_so():
    with pytest.raises(TemplateValueError) as err:
        Template("{tenant}").render(Row("acme", 1))
    assert "the record has no field 'tenant' (a Row without field names" in str(err.value)


def test_lookup_works_without_pyflink_loaded(monkeypatch):
    monkeypatch.delitem(sys.modules, "pyflink.common.types")
    assert _helpers.row_type() is None
    assert Template("{a}_{b.region}").render({"a": 1, "b": Customer("eu", 1)}) == "1_eu"


# --- event time and processing time ---------------------------------------------------------


def test_event_time_is_the_contexts_timestamp_in_utc():
    t = Template("orders_{event_time:%Y%m%d_%H%M}")
    assert t.render({}, ctx()) == "orders_20240501_1000"


def test_event_time_is_an_aware_datetime():
    assert Template("{event_time}").render({}, ctx()) == "2024-05-01T10:00:00+00:00"
    assert Template("{event_time.year}-{event_time.month}").render({}, ctx()) == "2024-5"
    assert Template("{event_time:%Y%m%d}").render({}, ctx(-86_400_000)) == "19691231"


def test_a_record_field_named_event_time_comes_first():
    t = Template("{event_time:%Y}")
    assert t.render({"event_time": datetime(2020, 1, 1)}, ctx()) == "2020"


@pytest.mark.parametrize("context", [None, WriterContext(timestamp=None)])
def test_event_time_without_a_timestamp_is_a_value_error(context):
    with pytest.raises(TemplateValueError) as err:
        Template("orders_{event_time:%Y%m%d}").render({"id": 1}, context)
    assert str(err.value) == (
        "template 'orders_{event_time:%Y%m%d}': placeholder {event_time:%Y%m%d}: the record "
        "has no field 'event_time' and no event timestamp (assign timestamps with a "
        "WatermarkStrategy, or add the field); record {'id': 1}"
    )


def test_the_cached_second_never_shows_another_seconds_text():
    t = Template("{event_time:%Y%m%d}")
    day_end = MAY_1 + 14 * 3_600_000 - 500  # 23:59:59.500
    assert t.render({}, ctx(day_end)) == "20240501"
    assert t.render({}, ctx(day_end + 400)) == "20240501"
    assert t.render({}, ctx(day_end + 600)) == "20240502"
    assert t.render({}, ctx(day_end)) == "20240501"


def test_sub_second_specs_are_not_cached_per_second():
    t = Template("{event_time:%S.%f}")
    assert t.render({}, ctx(MAY_1 + 1)) == "00.001000"
    assert t.render({}, ctx(MAY_1 + 2)) == "00.002000"


def test_processing_time_uses_now():
    t = Template("{processing_time:%Y%m%d%H}")
    now = datetime(2024, 5, 1, 10, 30, tzinfo=UTC)
    assert t.render({}, now=now) == "2024050110"
    assert Template("{processing_time}").render({}, now=now) == "2024-05-01T10:30:00+00:00"


def test_a_naive_now_is_utc_and_an_aware_one_keeps_its_zone():
    naive = datetime(2024, 5, 1, 10, 30)
    assert Template("{processing_time}").render({}, now=naive) == "2024-05-01T10:30:00+00:00"
    aware = datetime(2024, 5, 1, 1, 30, tzinfo=timezone(timedelta(hours=2)))
    assert Template("{processing_time:%Y%m%d}").render({}, now=aware) == "20240501"


def test_processing_time_defaults_to_the_clock_read_once_per_render():
    t = Template("{processing_time:%Y%m%d%H%M%S%f}|{processing_time:%Y%m%d%H%M%S%f}")
    before = datetime.now(UTC)
    first, second = t.render({}).split("|")
    after = datetime.now(UTC)
    assert first == second
    stamp = datetime.strptime(first, "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)
    assert before <= stamp <= after


def test_processing_time_ignores_the_context():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert Template("{processing_time:%Y}").render({}, ctx(), now=now) == "2030"


# --- formatting with a spec -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime(2024, 5, 1, 10, 0), "20240501T10"),
        (datetime(2024, 5, 1, 1, 0, tzinfo=timezone(timedelta(hours=2))), "20240501T01"),
        (date(2024, 5, 1), "20240501T00"),
        (MAY_1, "20240501T10"),  # epoch milliseconds
        (float(MAY_1) + 0.5, "20240501T10"),
        (-1, "19691231T23"),
        ("2024-05-01T10:15:00Z", "20240501T10"),
        ("2024-05-01T10:15:00+00:00", "20240501T10"),
        ("2024-05-01T12:15:00+02:00", "20240501T12"),  # formatted in its own offset
        ("2024-05-01T10:15:00", "20240501T10"),  # naive: UTC
        ("2024-05-01 10:15:00.123456", "20240501T10"),
        ("2024-05-01", "20240501T00"),
        (Instant.of_epoch_milli(MAY_1), "20240501T10"),
    ],
)
def test_time_specs(value, expected):
    assert Template("{t:%Y%m%dT%H}").render({"t": value}) == expected


def test_a_time_of_day_and_an_iso_string_with_a_zone_directive():
    assert Template("{t:%H%M}").render({"t": time(7, 5)}) == "0705"
    assert Template("{t:%z}").render({"t": "2024-05-01T10:15:00"}) == "+0000"
    assert Template("{t:%z}").render({"t": "2024-05-01T10:15:00-05:00"}) == "-0500"


@pytest.mark.parametrize("value", ["tomorrow", "2024-13-01", ""])
def test_a_string_that_is_not_iso_under_a_time_spec(value):
    with pytest.raises(TemplateValueError) as err:
        Template("d_{t:%Y}").render({"t": value})
    assert str(err.value) == (
        f"template 'd_{{t:%Y}}': placeholder {{t:%Y}}: cannot format {value!r}: {value!r} is "
        f"not an ISO-8601 date or timestamp; record {{'t': {value!r}}}"
    )


def test_a_bool_is_not_epoch_milliseconds_and_epochs_have_a_range():
    with pytest.raises(TemplateValueError, match=r"cannot format True"):
        Template("{t:%Y}").render({"t": True})
    with pytest.raises(TemplateValueError, match=r"cannot format 10000000000000000000"):
        Template("{t:%Y}").render({"t": 10**19})
    with pytest.raises(TemplateValueError, match=r"cannot format nan"):
        Template("{t:%Y}").render({"t": float("nan")})


@pytest.mark.parametrize(
    ("spec", "value", "expected"),
    [
        ("05d", 42, "00042"),
        ("x", 255, "ff"),
        ("03", 7, "007"),
        (",", 1234567, "1,234,567"),
        (">4", 7, "   7"),
        ("%>4", 7, "%%%7"),  # '%' as fill: not a time spec
        (".0%", 0.5, "50%"),  # percentage: not a time spec
        (".2f", 3.14159, "3.14"),
        ("d", True, "1"),  # format() semantics with a spec
        (">5", "ab", "   ab"),
        ("s", "2024-05-01", "2024-05-01"),  # no time directive: the string as it is
        (".2f", Decimal("1.005"), "1.00"),
    ],
)
def test_format_specs(spec, value, expected):
    assert Template(f"{{v:{spec}}}").render({"v": value}) == expected


def test_a_format_spec_the_value_does_not_take():
    with pytest.raises(TemplateValueError) as err:
        Template("q_{n:q}").render({"n": 7})
    assert str(err.value) == (
        "template 'q_{n:q}': placeholder {n:q}: cannot format 7: Unknown format code 'q' for "
        "object of type 'int'; record {'n': 7}"
    )


def test_a_spec_on_a_datetime_is_strftime_even_without_directives():
    assert Template("{t:day}").render({"t": date(2024, 5, 1)}) == "day"


# --- formatting without a spec --------------------------------------------------------------


class Tier(IntEnum):
    GOLD = 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("acme/eu", "acme/eu"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-17, "-17"),
        (10**20, "100000000000000000000"),
        (Tier.GOLD, "1"),
        (1.5, "1.5"),
        (Decimal("2.50"), "2.50"),
        (datetime(2024, 5, 1, 10, 0), "2024-05-01T10:00:00"),
        (datetime(2024, 5, 1, 10, 0, tzinfo=UTC), "2024-05-01T10:00:00+00:00"),
        (date(2024, 5, 1), "2024-05-01"),
        (time(7, 5), "07:05:00"),
        (Instant.of_epoch_milli(MAY_1), "2024-05-01T10:00:00+00:00"),
    ],
)
def test_values_without_a_spec(value, expected):
    assert Template("{v}").render({"v": value}) == expected


def test_bytes_have_no_text():
    with pytest.raises(TemplateValueError, match="bytes have no text"):
        Template("{v}").render({"v": b"acme"})


# --- the rule: checking, and sanitizing on request ------------------------------------------

BQ = names.bigquery_table_id


def test_a_rule_checks_values_without_changing_them():
    t = Template("Orders-{tenant}_{event_time:%Y-%m-%d}", BQ)
    assert not t.sanitizes and t.rule is BQ and t.sanitizer is None
    assert t.render({"tenant": "Acme EU 1"}, ctx()) == "Orders-Acme EU 1_2024-05-01"  # valid
    with pytest.raises(TemplateValueError) as err:
        t.render({"tenant": "acme/eu"}, ctx())
    assert str(err.value) == (
        "template 'Orders-{tenant}_{event_time:%Y-%m-%d}': placeholder {tenant} is 'acme/eu': "
        "'/' is not allowed; a BigQuery table id allows only letters, marks, numbers, "
        "connectors such as '_', dashes and spaces (values are not sanitized); record "
        "{'tenant': 'acme/eu'}"
    )


def test_a_value_starting_the_name_as_no_name_may_is_named_without_sanitizing():
    t = Template("{region}-events", names.pubsub_topic_id)
    with pytest.raises(TemplateValueError, match=r"placeholder \{region\} is '9lives': starts"):
        t.render({"region": "9lives"})
    # A name the values alone do not explain is named whole.
    with pytest.raises(TemplateValueError, match="rendered 'eu', which has 2 characters"):
        Template("{region}", names.pubsub_topic_id).render({"region": "eu"})


def test_sanitize_true_applies_the_rule_to_values_not_to_literal_text():
    t = Template("Orders-{tenant}_{event_time:%Y-%m-%d}", BQ, sanitize=True)
    assert t.sanitizes and t.sanitizer is BQ
    assert t.render({"tenant": "Acme/EU 1"}, ctx()) == "Orders-Acme_EU_1_2024-05-01"


def test_sanitizer_is_the_shorthand_for_a_rule_that_sanitizes():
    assert Template("{a}", sanitizer=BQ) == Template("{a}", BQ, sanitize=True)
    assert Template("{a}", BQ, sanitizer=BQ) == Template("{a}", rule=BQ, sanitize=True)
    with pytest.raises(TypeError, match="one rule"):
        Template("{a}", BQ, sanitizer=names.pubsub_topic_id)


def test_the_sanitizer_applies_to_every_formatted_value():
    t = Template("q-{n}-{t}", names.cloudtasks_queue_id, sanitize=True)
    assert t.render({"n": 1.5, "t": datetime(2024, 5, 1, 10)}) == "q-1-5-2024-05-01T10-00-00"


def test_bigquery_literal_text_may_use_what_bigquery_allows():
    t = Template("daily orders é_{tenant}", BQ, sanitize=True)
    assert t.render({"tenant": "é x"}) == "daily orders é___x"


@pytest.mark.parametrize(
    ("rule", "value", "name"),
    [
        (names.pubsub_topic_id, "9lives", "x9lives"),  # a topic id starts with a letter
        (names.pubsub_topic_id, "/eu-west", "x_eu-west"),
        (names.spanner_table_name, "2024_orders", "x2024_orders"),
        (names.bigtable_table_id, "-x", "_-x"),  # '_' may start a Bigtable table id
        (names.bigtable_table_id, "9x", "9x"),  # and so may a digit
        (names.bigquery_table_id, "9x", "9x"),  # BigQuery has no rule for the start
    ],
)
def test_sanitizing_prefixes_a_value_that_starts_the_name_as_no_name_may(rule, value, name):
    assert Template("{r}", rule, sanitize=True).render({"r": value}) == name
    # Not at the start, the value is not prefixed.
    assert Template("t{r}", rule, sanitize=True).render({"r": value}) == "t" + value.replace(
        "/", rule.replacement
    )


def test_a_rendered_name_the_service_refuses_is_a_value_error():
    t = Template("{region}", names.pubsub_topic_id, sanitize=True)
    assert t.render({"region": "europe"}) == "europe"
    with pytest.raises(TemplateValueError) as err:
        t.render({"region": "eu"})
    assert str(err.value) == (
        "template '{region}' rendered 'eu', which has 2 characters; a Pub/Sub topic id has 3 "
        "to 255 characters; record {'region': 'eu'}"
    )


@pytest.mark.parametrize("sanitize", [False, True])
@pytest.mark.parametrize(
    ("rule", "text", "record", "reason"),
    [
        (names.pubsub_topic_id, "{r}-events", {"r": "google"}, "starts with 'goog'"),
        (names.cloudtasks_queue_id, "q{r}", {"r": "x" * 100}, "has 101 characters"),
        (names.bigquery_table_id, "{r}", {"r": ""}, "is empty"),
        (names.bigtable_table_id, "{r}", {"r": "t" * 51}, "has 51 characters"),
    ],
)
def test_validation_failures(rule, text, record, reason, sanitize):
    with pytest.raises(TemplateValueError, match=reason):
        Template(text, rule, sanitize=sanitize).render(record)


@pytest.mark.parametrize(
    ("rule", "value", "reason"),
    [
        (names.pubsub_topic_id, "9lives", "starts with '9'"),
        (names.bigtable_table_id, "-x", "starts with '-'"),
        (names.spanner_table_name, "_x", "starts with '_'"),
        (names.cloudtasks_queue_id, "a_b", "'_' is not allowed"),
    ],
)
def test_without_sanitizing_the_value_at_fault_is_named(rule, value, reason):
    with pytest.raises(TemplateValueError) as err:
        Template("{r}", rule).render({"r": value})
    assert f"placeholder {{r}} is {value!r}: {reason}" in str(err.value)
    assert rule.label in str(err.value) and "(values are not sanitized)" in str(err.value)


def test_render_unchecked_then_check_names_the_value():
    t = Template("orders_{tenant}", BQ)
    name = t.render({"tenant": "a:b"}, checked=False)
    assert name == "orders_a:b"
    with pytest.raises(TemplateValueError, match=r"placeholder \{tenant\} is 'a:b': ':' is not"):
        t.check(name, {"tenant": "a:b"})
    with pytest.raises(TemplateValueError, match="rendered 'orders_a:b', which contains ':'"):
        t.check(name)  # without the record, the name is named


def test_literal_text_the_service_never_accepts_fails_at_construction():
    for sanitize in (False, True):
        with pytest.raises(TemplateError) as err:
            Template("orders:{tenant}", BQ, sanitize=sanitize)
        assert str(err.value) == (
            "template 'orders:{tenant}': the literal text at position 6 can never be part of a "
            "valid name: ':' is not allowed; a BigQuery table id allows only letters, marks, "
            "numbers, connectors such as '_', dashes and spaces"
        )


def test_literal_positions_count_escaped_braces_as_written():
    with pytest.raises(TemplateError, match="the literal text at position 5 .*'{' is not allowed"):
        Template("{a}_x{{b}}", names.pubsub_topic_id)
    braces = NameRule("braced id", allowed="{}_", replacement="_", min_length=1, max_length=50)
    with pytest.raises(TemplateError, match="the literal text at position 9 .*'/' is not allowed"):
        Template("{a}_{{b}}/x", braces)


def test_a_leading_literal_must_start_the_name_validly():
    with pytest.raises(TemplateError, match="starts with '1'; a Pub/Sub topic id"):
        Template("1-{region}", names.pubsub_topic_id, sanitize=True)
    with pytest.raises(TemplateError, match="starts with 'goog'"):
        Template("goog-{region}", names.pubsub_topic_id)
    assert Template("{region}-1", names.pubsub_topic_id).render({"region": "eu"})


def test_literal_text_longer_than_any_valid_name_fails_at_construction():
    with pytest.raises(TemplateError) as err:
        Template("q" * 101 + "{n}", names.cloudtasks_queue_id)
    assert str(err.value).endswith(
        "its literal text alone has 101 characters, more than the 100 a valid name has"
    )


def test_a_constant_template_is_validated_at_construction():
    assert Template("orders", BQ).render({}) == "orders"
    with pytest.raises(TemplateError) as err:
        Template("ab", names.pubsub_topic_id)
    assert str(err.value) == (
        "template 'ab' is not a valid name: it has 2 characters; a Pub/Sub topic id has 3 to "
        "255 characters"
    )


def test_a_plain_callable_sanitizes_without_validation():
    t = Template("T_{tenant}", sanitizer=str.upper)
    assert t.sanitizes and t.rule is None
    assert t.render({"tenant": "acme"}) == "T_ACME"
    assert Template("a:b", sanitizer=str.upper).render({}) == "a:b"


def test_a_plain_callable_with_a_rule_sanitizes_and_the_rule_checks():
    t = Template("t-{a}", names.cloudtasks_queue_id, sanitizer=lambda v: v.replace(" ", "-"))
    assert t.render({"a": "x y"}) == "t-x-y"
    with pytest.raises(TemplateValueError, match="rendered 't-x_y', which contains '_'"):
        t.render({"a": "x_y"})


def test_another_sanitizer_runs_for_every_value():
    calls = []

    def upper(value: str) -> str:
        calls.append(value)
        return value.upper()

    t = Template("T_{tenant}", sanitizer=upper)
    assert [t.render({"tenant": "acme"}) for _ in range(3)] == ["T_ACME"] * 3
    assert calls == ["acme"] * 3


def test_a_custom_rule_object():
    class Dashes:
        def sanitize(self, value: str) -> str:
            return value.replace(" ", "-")

        def validate(self, name: str) -> str | None:
            return None if len(name) < 10 else "is too long"

    t = Template("{a}", Dashes(), sanitize=True)
    assert t.render({"a": "a b"}) == "a-b"
    with pytest.raises(TemplateValueError, match="which is too long"):
        t.render({"a": "a b c d e f"})
    checked = Template("{a}", Dashes())
    assert checked.render({"a": "a b"}) == "a b"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sanitizer": "bigquery"}, "got str"),
        ({"rule": "bigquery"}, "has validate"),
        ({"rule": str.upper}, "a function of the value goes in sanitizer="),
        ({"sanitize": True}, "sanitize=True needs a rule that sanitizes"),
    ],
)
def test_arguments_that_make_no_template(kwargs, message):
    with pytest.raises(TypeError, match=message):
        Template("{a}", **kwargs)


# --- collisions -----------------------------------------------------------------------------


def test_two_values_that_sanitize_to_one_name_are_never_merged(caplog):
    t = Template("orders_{tenant}_{event_time:%Y%m%d}", BQ, sanitize=True)
    assert t.render({"tenant": "acme/eu"}, ctx()) == "orders_acme_eu_20240501"
    with caplog.at_level("WARNING", logger="pyflink_gcp.routing"):
        for _ in range(3):
            with pytest.raises(TemplateValueError) as err:
                t.render({"tenant": "acme_eu"}, ctx())
            assert str(err.value) == (
                "template 'orders_{tenant}_{event_time:%Y%m%d}': placeholder {tenant}: the "
                "values 'acme/eu' and 'acme_eu' both sanitize to 'acme_eu', so both would be "
                "'orders_acme_eu_20240501'; 'acme/eu', seen first, keeps it and 'acme_eu' is "
                "unroutable; record {'tenant': 'acme_eu'}"
            )
        # The first value keeps its name.
        assert t.render({"tenant": "acme/eu"}, ctx()) == "orders_acme_eu_20240501"
        # A third value taking the same name is refused too, and logged once more.
        with pytest.raises(TemplateValueError, match="'acme/eu' and 'acme eu' both"):
            t.render({"tenant": "acme eu"}, ctx())
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "template 'orders_{tenant}_{event_time:%Y%m%d}' placeholder {tenant}: the values "
        "'acme/eu' and 'acme_eu' both sanitize to 'acme_eu'; 'acme/eu', seen first, keeps the "
        "name, and records with 'acme_eu' are unroutable (logged once per pair)",
        "template 'orders_{tenant}_{event_time:%Y%m%d}' placeholder {tenant}: the values "
        "'acme/eu' and 'acme eu' both sanitize to 'acme_eu'; 'acme/eu', seen first, keeps the "
        "name, and records with 'acme eu' are unroutable (logged once per pair)",
    ]


def test_the_value_seen_first_keeps_the_name_whichever_it_is():
    t = Template("orders_{tenant}", BQ, sanitize=True)
    assert t.render({"tenant": "acme_eu"}) == "orders_acme_eu"
    with pytest.raises(TemplateValueError, match="'acme_eu' and 'acme/eu' both sanitize"):
        t.render({"tenant": "acme/eu"})


def test_collisions_are_unchecked_by_render_checked_false_all_the_same():
    t = Template("orders_{tenant}", BQ, sanitize=True)
    t.render({"tenant": "a/b"}, checked=False)
    with pytest.raises(TemplateValueError, match="both sanitize to 'a_b'"):
        t.render({"tenant": "a_b"}, checked=False)


def test_each_placeholder_has_its_own_owners():
    # 'x/y' in {a} and 'x_y' in {b} are no collision: they sit in different parts of the name.
    t = Template("{a}-{b}", BQ, sanitize=True)
    assert t.render({"a": "x/y", "b": "x_y"}) == "x_y-x_y"
    assert t.render({"a": "x/y", "b": "x_y"}) == "x_y-x_y"
    with pytest.raises(TemplateValueError, match=r"placeholder \{a\}: the values 'x/y' and 'x_y'"):
        t.render({"a": "x_y", "b": "x_y"})


def test_values_without_sanitizing_never_collide():
    t = Template("orders_{tenant}", BQ)
    assert t.render({"tenant": "acme eu"}) == "orders_acme eu"
    assert t.render({"tenant": "acme_eu"}) == "orders_acme_eu"


def test_a_plain_callable_sanitizer_is_collision_checked_too():
    t = Template("{a}", sanitizer=str.lower)
    assert t.render({"a": "Acme"}) == "acme"
    with pytest.raises(TemplateValueError, match="'Acme' and 'acme' both sanitize to 'acme'"):
        t.render({"a": "acme"})
    assert t.render({"a": "Acme"}) == "acme"


def _kept(t: Template) -> int:
    return sum(len(p.values.owners) + len(p.values.collided) for p in t._placeholders)


def test_a_rules_sanitized_values_are_kept_in_a_bounded_window(monkeypatch):
    monkeypatch.setattr(templates, "_CACHED_VALUES", 4)
    t = Template("orders_{tenant}_{region}", BQ, sanitize=True)
    for round_ in range(3):  # the window is emptied on the way and filled again
        for i in range(10):
            record = {"tenant": f"acme/{i}.eu", "region": f"r{i}"}
            assert t.render(record) == f"orders_acme_{i}_eu_r{i}", round_
            assert _kept(t) <= 4
            cache = t._placeholders[0].cache
            assert cache is not None and len(cache) <= 4


def test_a_collision_outlives_the_window(monkeypatch):
    monkeypatch.setattr(templates, "_CACHED_VALUES", 4)
    t = Template("{tenant}", BQ, sanitize=True)
    t.render({"tenant": "acme/eu"})
    with pytest.raises(TemplateValueError):
        t.render({"tenant": "acme_eu"})
    for i in range(20):  # turns the window over several times
        t.render({"tenant": f"t{i}"})
        assert _kept(t) <= 4
    with pytest.raises(TemplateValueError, match="'acme/eu' and 'acme_eu'"):
        t.render({"tenant": "acme_eu"})
    assert t.render({"tenant": "acme/eu"}) == "acme_eu"


def test_collisions_that_fill_half_the_window_are_forgotten_with_it(monkeypatch):
    monkeypatch.setattr(templates, "_CACHED_VALUES", 4)
    t = Template("{tenant}", BQ, sanitize=True)
    for pair in ("a", "b"):
        t.render({"tenant": f"{pair}/x"})
        with pytest.raises(TemplateValueError):
            t.render({"tenant": f"{pair}_x"})
    assert _kept(t) == 4
    t.render({"tenant": "c"})  # the window is full: everything goes, the pairs too
    assert _kept(t) == 1
    assert t.render({"tenant": "a_x"}) == "a_x"  # a new window: 'a_x' is first now


def test_a_window_of_one_template_counts_all_its_placeholders(monkeypatch):
    monkeypatch.setattr(templates, "_CACHED_VALUES", 6)
    t = Template("{a}_{b}_{c}", BQ, sanitize=True)
    for i in range(10):
        t.render({"a": f"a{i}", "b": f"b{i}", "c": f"c{i}"})
        assert _kept(t) <= 6


# --- check_fields ---------------------------------------------------------------------------


def test_check_fields_accepts_known_roots_and_the_time_roots():
    t = Template("orders_{tenant}_{customer.region}_{event_time:%Y}_{processing_time:%H}")
    t.check_fields(["tenant", "customer"], owner="gcp-bigquery 'table'")
    t.check_fields(iter(["customer", "tenant", "extra"]), owner="x")


def test_check_fields_names_the_first_unknown_placeholder():
    t = Template("orders_{tenant}_{event_time:%Y%m%d}_{customer.region}")
    with pytest.raises(TemplateError) as err:
        t.check_fields(["b", "a", "tenant"], owner="gcp-bigquery 'table'")
    assert str(err.value) == (
        "gcp-bigquery 'table': unknown placeholder {customer.region} in template "
        "'orders_{tenant}_{event_time:%Y%m%d}_{customer.region}'; known: a, b, tenant, "
        "event_time, processing_time"
    )


def test_check_fields_lists_each_known_name_once():
    t = Template("{x}")
    with pytest.raises(TemplateError) as err:
        t.check_fields(["b", "a", "event_time", "a"], owner="o")
    assert str(err.value) == (
        "o: unknown placeholder {x} in template '{x}'; known: a, b, event_time, processing_time"
    )


def test_check_fields_with_no_fields():
    with pytest.raises(TemplateError, match="known: event_time, processing_time$"):
        Template("{x}").check_fields([], owner="o")
    Template("{event_time:%Y}").check_fields([], owner="o")
    Template("constant").check_fields([], owner="o")


# --- the template value ---------------------------------------------------------------------


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_templates_pickle(dumps):
    t = Template("orders_{tenant}_{event_time:%Y%m%d}", names.bigquery_table_id, sanitize=True)
    assert t.render({"tenant": "a b"}, ctx()) == "orders_a_b_20240501"  # fills the cache
    copy = pickle.loads(dumps(t))
    assert copy == t
    assert hash(copy) == hash(t)
    assert copy.placeholders == t.placeholders
    assert copy.render({"tenant": "a b"}, ctx(MAY_1 + 86_400_000)) == "orders_a_b_20240502"
    assert copy.sanitizes and copy.rule == names.bigquery_table_id
    checked = Template("{a}", names.bigquery_table_id)
    assert pickle.loads(dumps(checked)) == checked and not pickle.loads(dumps(checked)).sanitizes


def test_a_pickled_template_is_small_and_a_callable_sanitizer_travels_with_cloudpickle():
    t = Template("orders_{tenant}_{event_time:%Y%m%d}", names.bigquery_table_id, sanitize=True)
    t.render({"tenant": "a b"}, ctx())  # a value kept does not travel
    assert len(pickle.dumps(t)) < 600
    t = Template("{a}", sanitizer=lambda value: value.replace("/", "-"))
    assert cloudpickle.loads(cloudpickle.dumps(t)).render({"a": "x/y"}) == "x-y"


def test_templates_are_immutable():
    t = Template("{a}")
    with pytest.raises(AttributeError, match="immutable"):
        t.text = "{b}"  # type: ignore[misc]


def test_equality_and_repr():
    rule = names.bigquery_table_id
    assert Template("{a}", rule) == Template("{a}", rule=rule)
    assert Template("{a}", rule) != Template("{a}", rule, sanitize=True)
    assert Template("{a}", sanitizer=rule) == Template("{a}", rule, sanitize=True)
    assert Template("{a}") != Template("{a}", rule)
    assert Template("{a}") != Template("{b}")
    assert Template("{a}") != "{a}"
    assert repr(Template("{a}")) == "Template('{a}')"
    assert repr(Template("{a}", rule)) == "Template('{a}', rule=NameRule('BigQuery table id'))"
    assert repr(Template("{a}", rule, sanitize=True)) == (
        "Template('{a}', rule=NameRule('BigQuery table id'), sanitize=True)"
    )
    assert repr(Template("{a}", sanitizer=str.upper)).startswith("Template('{a}', sanitizer=")
