"""Metric names: the identifier rule for resource names, and the per-destination counters."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.core.metrics import (
    DESTINATION_GROUP,
    MAX_IDENTIFIER_LENGTH,
    DestinationMetrics,
    metric_identifier,
)


def test_resource_names_become_identifiers_of_letters_digits_and_underscores() -> None:
    assert metric_identifier("projects/p/topics/x") == "projects_p_topics_x"
    assert metric_identifier("projects/p/topics/orders-eu.v2") == "projects_p_topics_orders_eu_v2"
    assert metric_identifier("p.dataset.table_1") == "p_dataset_table_1"
    assert metric_identifier("//a~~b%%") == "a_b"
    assert metric_identifier("unresolved") == "unresolved"
    assert metric_identifier("///") == "_"


def test_long_identifiers_are_cut_and_stay_distinct() -> None:
    a = metric_identifier("projects/p/topics/" + "a" * 300)
    b = metric_identifier("projects/p/topics/" + "a" * 299 + "b")
    assert len(a) == len(b) == MAX_IDENTIFIER_LENGTH and a != b
    assert a.startswith("projects_p_topics_aaa")


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class Group:
    """Records the groups and counters created, like PyFlink's MetricGroup (bookkeeping only)."""

    def __init__(self, scope: tuple[str, ...] = ()) -> None:
        self.scope = scope
        self.registry: dict[str, Counter] = {}
        self.groups = 0

    def add_group(self, name: str, extra: str | None = None) -> Any:
        self.groups += 1
        child = Group((*self.scope, name, extra or ""))
        child.registry = self.registry
        return child

    def counter(self, name: str) -> Counter:
        return self.registry.setdefault(".".join((*self.scope, name)), Counter())


def test_destination_counters_use_the_identifier_and_are_created_once() -> None:
    group = Group()
    metrics = DestinationMetrics(group)
    for _ in range(3):
        metrics.written("projects/p/topics/x", 10)
    metrics.written("projects/p/topics/x", 0)
    metrics.error("unresolved")
    counts = {name: c.count for name, c in group.registry.items()}
    assert counts["destination.projects_p_topics_x.records"] == 4
    assert counts["destination.projects_p_topics_x.bytes"] == 30
    assert counts["destination.unresolved.errors"] == 1
    assert group.groups == 2 and DESTINATION_GROUP == "destination"


def test_without_a_metric_group_nothing_is_counted() -> None:
    metrics = DestinationMetrics(None)
    metrics.written("projects/p/topics/x", 10)
    metrics.error("projects/p/topics/x")


def test_a_destinations_counters_are_registered_together_on_its_first_record() -> None:
    group = Group()
    metrics = DestinationMetrics(group)
    metrics.written("projects/p/topics/x", 5)
    assert group.registry["destination.projects_p_topics_x.errors"].count == 0
    metrics.error("projects/p/topics/x")
    assert group.registry["destination.projects_p_topics_x.errors"].count == 1
    assert group.groups == 1


def test_docs_metrics_lists_every_declared_name() -> None:
    from pathlib import Path

    from pyflink_gcp.core.metrics import (
        COMMITTER_GAUGES,
        DESTINATION_COUNTERS,
        SERVICE_GAUGES,
        SINK_GAUGES,
    )

    text = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    for name in [*SINK_GAUGES, *SERVICE_GAUGES, *COMMITTER_GAUGES]:
        assert f"`pyflink_gcp.{name}`" in text, name
    for name in DESTINATION_COUNTERS:
        assert f".{name}`" in text, name
