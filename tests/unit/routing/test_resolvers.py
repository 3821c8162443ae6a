"""route_by_field and route_by_template: routes, fallbacks, unroutable records, the check a sink
makes when it is built, and pickling."""

from __future__ import annotations

import pickle
from collections import OrderedDict
from datetime import UTC, datetime
from types import SimpleNamespace

import cloudpickle
import pytest

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.types import UnroutableRecord, WriterContext
from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from pyflink_gcp.routing import (
    bigquery_tables,
    pubsub_topics,
    route_by_field,
    route_by_template,
)

EU = TopicDestination.of("p", "orders-eu")
US = TopicDestination.of("p", "orders-us")
OTHER = TopicDestination.of("p", "orders-other")
CTX = WriterContext(timestamp=int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000))


def by_region(**kwargs: object):
    return route_by_field("region", {"eu": EU, "us": US}, **kwargs)  # type: ignore[arg-type]


def test_values_route_and_the_rest_falls_back() -> None:
    resolver = by_region(fallback=OTHER)
    assert resolver({"region": "eu"}, CTX) == EU
    assert resolver(b'{"region": "us", "big": "x"}', CTX) == US
    assert resolver({"region": "jp"}, CTX) == OTHER  # unmatched
    assert resolver({"id": 1}, CTX) == OTHER  # missing
    assert resolver(b"garbage", CTX) == OTHER  # unparseable
    assert resolver({"region": ["eu"]}, CTX) == OTHER  # unhashable: no route


def test_unroutable_records_carry_their_payload_and_reason() -> None:
    resolver = by_region(unroutable=True)
    result = resolver({"region": "jp", "id": 7}, CTX)
    assert isinstance(result, UnroutableRecord)
    assert result.payload == b'{"region": "jp", "id": 7}'
    assert result.reason == "no route for region='jp'"
    missing = resolver(b"garbage", CTX)
    assert isinstance(missing, UnroutableRecord) and missing.payload == b"garbage"
    assert missing.reason == "not a JSON object"


def test_a_function_of_the_value_routes_too() -> None:
    resolver = route_by_field("n", lambda n: EU if n % 2 else None, fallback=OTHER)
    assert resolver({"n": 3}, CTX) == EU and resolver({"n": 4}, CTX) == OTHER


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give exactly one of fallback=<destination>"),
        ({"fallback": OTHER, "unroutable": True}, "give exactly one of"),
        ({"fallback": "orders-other"}, "fallback must be a destination"),
    ],
)
def test_a_router_needs_exactly_one_way_out(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        by_region(**kwargs)


def test_routes_must_be_destinations() -> None:
    with pytest.raises(ConfigurationError, match="the route of 'eu' must be a destination"):
        route_by_field("region", {"eu": "orders-eu"}, fallback=OTHER)  # type: ignore[dict-item]


def pubsub_sink(resolver: object):
    return (
        PubSubSink.builder()
        .set_sink_name("routed")
        .set_destination_resolver(resolver)
        .set_serializer(PubSubSerializationSchema.payload(lambda r: b"x"))
        .build()
    )


def test_the_sink_refuses_a_router_of_another_service_at_build() -> None:
    wrong = route_by_field(
        "t", {"a": TableDestination.of("p", "d", "a")}, fallback=TableDestination.of("p", "d", "z")
    )
    with pytest.raises(ConfigurationError, match="not a TopicDestination"):
        pubsub_sink(wrong)
    pubsub_sink(by_region(fallback=OTHER))  # fits
    pubsub_sink(by_region(unroutable=True))  # every sink of the package takes unroutable records


def test_a_sink_that_does_not_take_unroutable_records_refuses_unroutable_true() -> None:
    """The check a sink of another package (a factory without ``accepts_unroutable``) makes."""
    by_region(fallback=OTHER).check_sink("custom", TopicDestination, False)
    with pytest.raises(ConfigurationError, match="which this sink does not accept"):
        by_region(unroutable=True).check_sink("custom", TopicDestination, False)


def test_templates_render_sanitized_names_per_service_on_request() -> None:
    resolver = route_by_template(
        "orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables("p", "shop", sanitize=True)
    )
    # Sanitized by BigQuery's table id rules: the space becomes an underscore (dashes are allowed).
    assert resolver({"tenant": "acme-eu west"}, CTX) == TableDestination.of(
        "p", "shop", "orders_acme-eu_west_20240501"
    )
    assert resolver.template.sanitizes
    assert repr(resolver) == (
        "route_by_template('orders_{tenant}_{event_time:%Y%m%d}', tables of p.shop, sanitized)"
    )
    topics = route_by_template("events-{kind}", pubsub_topics("p"), fallback=OTHER)
    assert topics({"kind": "click"}, CTX) == TopicDestination.of("p", "events-click")
    assert topics({"other": 1}, CTX) == OTHER  # cannot render: the fallback


def test_by_default_names_are_checked_not_sanitized() -> None:
    resolver = route_by_template("orders_{tenant}", bigquery_tables("p", "shop"), unroutable=True)
    assert not resolver.template.sanitizes
    # BigQuery allows the space: the name is the value's.
    assert resolver({"tenant": "acme eu"}, CTX) == TableDestination.of(
        "p", "shop", "orders_acme eu"
    )
    result = resolver({"tenant": "acme/eu", "id": 3}, CTX)
    assert isinstance(result, UnroutableRecord)
    assert result.payload == b'{"tenant": "acme/eu", "id": 3}'
    assert result.reason == (
        "template 'orders_{tenant}': placeholder {tenant} is 'acme/eu': '/' is not allowed; a "
        "BigQuery table id allows only letters, marks, numbers, connectors such as '_', dashes "
        "and spaces (values are not sanitized); record {'id': 3, 'tenant': 'acme/eu'}"
    )
    # The second time, the destination cache has not kept the name: refused again.
    assert isinstance(resolver({"tenant": "acme/eu"}, CTX), UnroutableRecord)


def test_a_value_starting_a_topic_id_with_a_digit_is_prefixed_only_when_sanitizing() -> None:
    checked = route_by_template("{kind}", pubsub_topics("p"), unroutable=True)
    refused = checked({"kind": "9lives"}, CTX)
    assert isinstance(refused, UnroutableRecord)
    assert "placeholder {kind} is '9lives': starts with '9'; a Pub/Sub topic id" in refused.reason
    sanitized = route_by_template("{kind}", pubsub_topics("p", sanitize=True), unroutable=True)
    assert sanitized({"kind": "9lives"}, CTX) == TopicDestination.of("p", "x9lives")


def test_a_sanitized_collision_makes_the_second_value_unroutable() -> None:
    resolver = route_by_template(
        "orders_{tenant}", bigquery_tables("p", "shop", sanitize=True), unroutable=True
    )
    table = TableDestination.of("p", "shop", "orders_acme_eu")
    assert resolver({"tenant": "acme/eu", "id": 1}, CTX) == table
    second = resolver({"tenant": "acme_eu", "id": 2}, CTX)
    assert isinstance(second, UnroutableRecord)
    assert second.payload == b'{"tenant": "acme_eu", "id": 2}'
    assert "the values 'acme/eu' and 'acme_eu' both sanitize to 'acme_eu'" in second.reason
    assert "so both would be 'orders_acme_eu'" in second.reason
    assert resolver({"tenant": "acme/eu", "id": 3}, CTX) == table
    with_fallback = route_by_template(
        "orders_{tenant}", bigquery_tables("p", "shop", sanitize=True), fallback=table
    )
    assert with_fallback({"tenant": "x/y"}, CTX) == TableDestination.of("p", "shop", "orders_x_y")
    assert with_fallback({"tenant": "x_y"}, CTX) == table  # the fallback, not orders_x_y


def test_a_template_object_keeps_its_switch_and_takes_the_services_rule() -> None:
    from pyflink_gcp.routing import Template, names

    sanitizing = Template("orders_{tenant}", names.bigquery_table_id, sanitize=True)
    kept = route_by_template(sanitizing, bigquery_tables("p", "d"), unroutable=True)
    assert kept.template is sanitizing
    bare = route_by_template(Template("orders_{tenant}"), bigquery_tables("p", "d", sanitize=True))
    assert bare.template.rule is names.bigquery_table_id and bare.template.sanitizes
    unchecked = route_by_template(Template("orders_{tenant}"), bigquery_tables("p", "d"))
    assert unchecked.template.rule is names.bigquery_table_id and not unchecked.template.sanitizes
    own = Template("orders_{tenant}", sanitizer=lambda v: v.replace(" ", "-"))
    mixed = route_by_template(own, bigquery_tables("p", "d"))
    assert mixed.template.rule is names.bigquery_table_id
    assert mixed({"tenant": "a b"}, CTX) == TableDestination.of("p", "d", "orders_a-b")


def test_destination_names_need_a_rule_to_sanitize() -> None:
    from pyflink_gcp.routing import DestinationNames

    with pytest.raises(ConfigurationError, match="sanitize=True needs the service's naming rule"):
        DestinationNames(lambda name: OTHER, None, "custom", sanitize=True)


def test_a_template_that_cannot_render_is_unroutable_for_bigquery() -> None:
    resolver = route_by_template("orders_{tenant}", bigquery_tables("p", "shop"), unroutable=True)
    result = resolver({"id": 1}, CTX)
    assert isinstance(result, UnroutableRecord) and "tenant" in result.reason


def test_known_fields_make_an_unknown_placeholder_an_error_now() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown placeholder \{tenat\}"):
        route_by_template(
            "orders_{tenat}", bigquery_tables("p", "shop"), unroutable=True, fields=["tenant"]
        )


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_routers_pickle(dumps) -> None:
    for resolver in (
        by_region(fallback=OTHER),
        route_by_template("events-{kind}", pubsub_topics("p"), fallback=OTHER),
        route_by_template("events-{kind}", pubsub_topics("p", sanitize=True), fallback=OTHER),
    ):
        if dumps is pickle.dumps and "template" in repr(resolver):
            continue  # the destination kinds hold lambdas: cloudpickle ships them
        copy = pickle.loads(dumps(resolver))
        assert repr(copy) == repr(resolver)
        assert copy({"region": "eu", "kind": "click"}, CTX) == resolver(
            {"region": "eu", "kind": "click"}, CTX
        )


def test_a_template_without_a_way_out_raises_for_the_sink_to_fail_the_job() -> None:
    resolver = route_by_template("events-{kind}", pubsub_topics("p"))
    with pytest.raises(ValueError, match="has no field 'kind'"):
        resolver({"id": 1}, CTX)


def test_a_rendered_name_the_service_refuses_takes_the_way_out_every_time() -> None:
    topics = route_by_template("{kind}", pubsub_topics("p"), fallback=OTHER)
    # "ab" is too short for a topic id; checked when the name is first met, then remembered
    # only when valid, so the second record is refused too.
    assert topics({"kind": "ab"}, CTX) == OTHER and topics({"kind": "ab"}, CTX) == OTHER
    assert topics({"kind": "abc"}, CTX) == TopicDestination.of("p", "abc")


MIXED = [
    {"region": "eu"},
    b'{"region": "us"}',
    {"region": "jp"},
    {"id": 1},
    '{"region": "eu"}',
    b"garbage",
    b"garbage",
    {"region": ["eu"]},
    {"region": "us"},
    SimpleNamespace(region="eu"),
    SimpleNamespace(other=1),
    OrderedDict(region="us"),
    {"region": "eu"},
]


@pytest.mark.parametrize("kwargs", [{"fallback": OTHER}, {"unroutable": True}])
def test_records_of_every_kind_in_turn_route_as_the_general_reader_routes_them(
    kwargs: dict,
) -> None:
    # The resolver tries the dict path first and switches to the general reader on the first
    # record that is not a dict, and back on the next dict: every record routes the same.
    resolver = by_region(**kwargs)
    for record in MIXED + MIXED[::-1]:
        assert resolver(record, CTX) == resolver._resolve(record, CTX), record


@pytest.mark.parametrize("kwargs", [{"fallback": OTHER}, {"unroutable": True}])
def test_a_route_for_none_is_taken_by_a_none_value_not_by_a_missing_field(kwargs: dict) -> None:
    resolver = route_by_field("region", {None: EU, "us": US}, **kwargs)  # type: ignore[dict-item]
    assert resolver({"region": None}, CTX) == EU
    assert resolver({"region": "us"}, CTX) == US
    missing = resolver({"id": 1}, CTX)
    assert missing == OTHER if "fallback" in kwargs else isinstance(missing, UnroutableRecord)
