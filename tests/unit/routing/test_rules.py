"""LiveRules: rule changes, the routing decision per record, broadcast state across a restore
(with a dict standing in for Flink's state), and the sink-side resolver."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.types import UnroutableRecord, WriterContext
from pyflink_gcp.pubsub import TopicDestination
from pyflink_gcp.routing import LiveRules, Routed, pubsub_topics
from pyflink_gcp.routing.rules import RoutedResolver, _RuleApplier, parse_change

OTHER = TopicDestination.of("p", "orders-other")
CTX = WriterContext()


class FakeState:
    """Broadcast state as a dict (bookkeeping only)."""

    def __init__(self, data: dict | None = None) -> None:
        self.data = dict(data or {})

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def items(self) -> Any:
        return self.data.items()

    def is_empty(self) -> bool:
        return not self.data


class FakeContext:
    def __init__(self, state: FakeState) -> None:
        self.state = state

    def get_broadcast_state(self, descriptor: Any) -> FakeState:
        return self.state


def rules(**kwargs: Any) -> LiveRules:
    kwargs.setdefault("fallback", OTHER)
    return LiveRules("region", pubsub_topics("p"), initial={"eu": "orders-eu"}, **kwargs)


@pytest.mark.parametrize(
    ("change", "parsed"),
    [
        ({"value": "eu", "destination": "orders-eu-2"}, ("eu", "orders-eu-2")),
        ('{"value": "us", "destination": null}', ("us", None)),
        (b'{"value": 7, "destination": "seven"}', (7, "seven")),
        ("not json", None),
        ({"value": "eu"}, None),
        ({"value": ["x"], "destination": "a"}, None),
        ({"value": "eu", "destination": ""}, None),
    ],
)
def test_changes_are_parsed_or_refused(change: Any, parsed: Any) -> None:
    assert parse_change(change) == parsed


def route_all(applier: _RuleApplier, ctx: FakeContext, records: list[dict]) -> list[Any]:
    return [next(iter(applier.process_element(r, ctx))).name for r in records]


def test_a_change_applies_from_the_next_record_and_a_deleted_rule_falls_back() -> None:
    applier = _RuleApplier(rules())
    ctx = FakeContext(FakeState())
    eu = {"region": "eu"}
    assert route_all(applier, ctx, [eu, {"region": "us"}, {"id": 1}]) == ["orders-eu", None, None]
    applier.process_broadcast_element('{"value": "eu", "destination": "orders-eu-2"}', ctx)
    applier.process_broadcast_element({"value": "us", "destination": "orders-us"}, ctx)
    assert route_all(applier, ctx, [eu, {"region": "us"}]) == ["orders-eu-2", "orders-us"]
    applier.process_broadcast_element({"value": "eu", "destination": None}, ctx)
    assert route_all(applier, ctx, [eu]) == [None]
    # The state holds every rule, a deleted one as an empty name.
    assert ctx.state.data == {"eu": "", "us": "orders-us"}


def test_a_restored_instance_routes_by_the_state_not_the_initial_rules() -> None:
    state = FakeState({"eu": "orders-eu-2", "us": "", "pl": "orders-pl"})
    applier = _RuleApplier(rules())  # a new instance after a restore
    ctx = FakeContext(state)
    records = [{"region": "eu"}, {"region": "us"}, {"region": "pl"}]
    assert route_all(applier, ctx, records) == ["orders-eu-2", None, "orders-pl"]


def test_the_initial_rules_survive_the_first_change_in_state() -> None:
    applier = _RuleApplier(rules())
    ctx = FakeContext(FakeState())
    applier.process_broadcast_element({"value": "us", "destination": "orders-us"}, ctx)
    restored = _RuleApplier(rules())
    assert route_all(restored, FakeContext(ctx.state), [{"region": "eu"}]) == ["orders-eu"]


def test_a_change_naming_an_invalid_destination_is_ignored() -> None:
    applier = _RuleApplier(rules())
    ctx = FakeContext(FakeState())
    applier.process_broadcast_element({"value": "eu", "destination": "goog-reserved"}, ctx)
    applier.process_broadcast_element("garbage", ctx)
    assert route_all(applier, ctx, [{"region": "eu"}]) == ["orders-eu"]


def test_unroutable_decisions_reach_the_failure_handler() -> None:
    live = rules(fallback=None, unroutable=True)
    routed = live.route({"eu": "orders-eu"}, {"region": "jp"})
    assert isinstance(routed.name, UnroutableRecord)
    assert live.resolver()(routed, CTX) is routed.name


def test_the_resolver_builds_destinations_and_hands_the_record_on() -> None:
    resolver = rules().resolver()
    record = {"region": "eu", "id": 1}
    assert resolver(Routed("orders-eu", record), CTX) == TopicDestination.of("p", "orders-eu")
    assert resolver(Routed(None, record), CTX) == OTHER
    assert RoutedResolver.record_of(Routed("x", record)) is record
    with pytest.raises(ConfigurationError, match="must come from LiveRules.apply"):
        resolver(record, CTX)


def test_initial_rules_are_checked_against_the_service_naming_rule() -> None:
    with pytest.raises(ConfigurationError, match="goog"):
        LiveRules("region", pubsub_topics("p"), initial={"eu": "goog-x"}, fallback=OTHER)


@pytest.mark.parametrize("dumps", [cloudpickle.dumps])
def test_rules_and_routed_records_pickle(dumps: Any) -> None:
    resolver = rules().resolver()
    copy = pickle.loads(dumps(resolver))
    assert copy(Routed("orders-eu", {}), CTX) == TopicDestination.of("p", "orders-eu")
    routed = pickle.loads(pickle.dumps(Routed("a", {"x": 1})))
    assert (routed.name, routed.record) == ("a", {"x": 1})
