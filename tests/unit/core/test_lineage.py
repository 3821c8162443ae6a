"""Lineage of dynamic destinations: each service's dataset names, once-only reports, the bound."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp.bigquery import TableDestination as BigQueryTable
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.cloudtasks import QueueDestination
from pyflink_gcp.core import ConfigurationError, LineageDataset, LineageListener, SubtaskInfo
from pyflink_gcp.core.lineage import (
    DEFAULT_MAX_LINEAGE_DATASETS,
    LINEAGE_COUNTER,
    LineageReporter,
    LineageSettings,
    dataset_of,
    sink_facets,
    static_datasets,
)
from pyflink_gcp.core.metrics import SINK_COUNTERS
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.pubsub import TopicDestination
from pyflink_gcp.spanner import DatabaseDestination
from tests.support.fakes import FileDestination, FileSink, FileSinkBuilder
from tests.unit.core.test_metrics import Group

# -- each service's dataset -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("destination", "namespace", "name", "service"),
    [
        (BigQueryTable.of("p", "sales", "orders"), "bigquery", "p.sales.orders", "bigquery"),
        (TopicDestination.of("p", "orders-eu"), "pubsub", "topic:p:orders-eu", "pubsub"),
        (
            QueueDestination.of("p", "us-central1", "hooks"),
            "cloudtasks",
            "p.us-central1.hooks",
            "cloudtasks",
        ),
        (BigtableTable.of("p", "inst", "events"), "bigtable", "p.inst.events", "bigtable"),
        (DatabaseDestination.of("p", "inst", "db"), "spanner", "p.inst.db", "spanner"),
    ],
    ids=["bigquery", "pubsub", "cloudtasks", "bigtable", "spanner"],
)
def test_each_destination_names_its_dataset(destination, namespace, name, service):
    dataset = dataset_of(destination)
    assert (dataset.namespace, dataset.name) == (namespace, name)
    assert dataset.facet("service") == service
    assert dataset.facet("resource") == destination.resource_name
    assert str(dataset) == f"{namespace}:{name}"


def test_the_partitions_of_a_bigquery_table_are_one_dataset():
    day = dataset_of(BigQueryTable.of("p", "d", "events$20261202"))
    other = dataset_of(BigQueryTable.of("p", "d", "events$20261203"))
    assert day == other and day.name == "p.d.events"
    assert day.facet("resource") == "projects/p/datasets/d/tables/events"


def test_a_destination_type_without_a_dataset_falls_back_to_its_resource_name():
    dataset = dataset_of(FileDestination.of("a"))
    assert (dataset.namespace, dataset.name) == ("gcp", "files/a")


def test_a_dataset_is_its_namespace_and_name_and_its_facets_are_sorted_strings():
    a = LineageDataset.of("pubsub", "topic:p:t", {"sink": "s", "attempt": 1})
    b = LineageDataset.of("pubsub", "topic:p:t")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.facets == (("attempt", "1"), ("sink", "s"))
    assert a.with_facets({"sink": "t"}).facet("sink") == "t"
    assert a.to_dict() == {
        "namespace": "pubsub",
        "name": "topic:p:t",
        "facets": {"attempt": "1", "sink": "s"},
    }
    assert pickle.loads(pickle.dumps(a)).facets == a.facets
    with pytest.raises(AttributeError):
        a.name = "x"  # type: ignore[misc]
    with pytest.raises(ValueError, match="non-empty namespace"):
        LineageDataset.of("", "x")


def test_sink_facets_name_the_sink_and_its_write_method():
    class Factory:
        pass

    assert sink_facets("s", Factory()) == {"sink": "s"}
    assert sink_facets("s", Factory(), "WriteMethod.FILE_LOADS") == {
        "sink": "s",
        "writeMethod": "FILE_LOADS",
    }


# -- the reporter -------------------------------------------------------------------------------


class Recorder(LineageListener):
    """Keeps what it is told (bookkeeping only)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def open(self, info: SubtaskInfo) -> None:
        self.events.append(("open", info.subtask_index))

    def on_dataset(self, dataset: LineageDataset) -> None:
        self.events.append(("dataset", str(dataset), dataset.facet("sink")))

    def on_limit_reached(self, limit: int) -> None:
        self.events.append(("limit", limit))

    def close(self) -> None:
        self.events.append(("close",))


def _reporter(listener: Any = None, limit: int = DEFAULT_MAX_LINEAGE_DATASETS) -> Any:
    reporter = LineageReporter("orders", LineageSettings(listener, limit, (("sink", "orders"),)))
    group = Group()
    reporter.open(SubtaskInfo("orders", subtask_index=3), group)
    return reporter, group


def test_each_dataset_is_reported_once_with_a_log_line_and_a_count(caplog):
    listener = Recorder()
    reporter, group = _reporter(listener)
    caplog.set_level(logging.INFO, logger="pyflink_gcp.lineage")
    for topic in ["a1x", "b2x", "a1x", "b2x", "c3x"]:
        reporter.resolved(TopicDestination.of("p", topic))
    assert listener.events == [
        ("open", 3),
        ("dataset", "pubsub:topic:p:a1x", "orders"),
        ("dataset", "pubsub:topic:p:b2x", "orders"),
        ("dataset", "pubsub:topic:p:c3x", "orders"),
    ]
    assert group.registry[LINEAGE_COUNTER].count == 3 == reporter.reported
    lines = [r.getMessage() for r in caplog.records if r.name == "pyflink_gcp.lineage"]
    assert lines[0] == (
        "orders: subtask 3 writes to lineage dataset pubsub:topic:p:a1x "
        "(resource projects/p/topics/a1x)"
    )
    assert len(lines) == 3
    reporter.close()
    assert listener.events[-1] == ("close",)


def test_past_the_bound_the_subtask_says_so_once_and_reports_nothing_more(caplog):
    listener = Recorder()
    reporter, group = _reporter(listener, limit=2)
    caplog.set_level(logging.INFO, logger="pyflink_gcp.lineage")
    for topic in ["t01", "t02", "t01", "t03", "t04", "t02", "t05"]:
        reporter.resolved(TopicDestination.of("p", topic))
    assert [e for e in listener.events if e[0] != "open"] == [
        ("dataset", "pubsub:topic:p:t01", "orders"),
        ("dataset", "pubsub:topic:p:t02", "orders"),
        ("limit", 2),
    ]
    assert reporter.limit_reached and group.registry[LINEAGE_COUNTER].count == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "reported 2 lineage datasets, its max_lineage_datasets" in warnings[0].getMessage()
    assert "pubsub:topic:p:t03" in warnings[0].getMessage()


def test_zero_turns_lineage_off():
    listener = Recorder()
    reporter, group = _reporter(listener, limit=0)
    reporter.resolved(TopicDestination.of("p", "t01"))
    assert listener.events == [] and group.registry == {} and not reporter.enabled


def test_a_listener_that_raises_is_logged_and_writing_goes_on(caplog):
    def broken(dataset: LineageDataset) -> None:
        raise RuntimeError("backend down")

    from pyflink_gcp.core.lineage import as_listener

    reporter, group = _reporter(as_listener(broken))
    reporter.resolved(TopicDestination.of("p", "t01"))
    reporter.resolved(TopicDestination.of("p", "t01"))
    assert group.registry[LINEAGE_COUNTER].count == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "pubsub:topic:p:t01" in errors[0].getMessage()


# -- through the sink writer and its registry --------------------------------------------------


def test_a_writer_reopened_after_eviction_is_not_reported_again(tmp_path):
    listener = Recorder()
    sink = FileSink(
        str(tmp_path),
        lambda r, c: FileDestination.of(r["d"]),
        max_active=1,
        lineage=LineageSettings(listener, 2, (("sink", "file-sink"),)),
    )
    writer = SinkWriter(sink._sink_config())
    writer.open(SubtaskInfo("file-sink", subtask_index=1))
    for d in ["a", "b", "a", "b", "c", "a"]:
        writer.write({"d": d})
    writer.flush()
    assert writer.registry.created >= 5  # the cap of one reopens writers
    writer.close()
    assert listener.events == [
        ("open", 1),
        ("dataset", "gcp:files/a", "file-sink"),
        ("dataset", "gcp:files/b", "file-sink"),
        ("limit", 2),
        ("close",),
    ]


def test_the_builder_carries_the_listener_and_the_bound():
    def listener(dataset: LineageDataset) -> None:
        pass

    config = (
        FileSinkBuilder()
        .set_destination_resolver(lambda r, c: FileDestination.of("a"))
        .set_serializer(lambda r, c: r)
        .set_lineage_listener(listener)
        .set_max_lineage_datasets(7)
        .build()
    )
    assert config.lineage.max_datasets == 7
    assert config.lineage.listener.fn is listener
    assert dict(config.lineage.facets) == {"sink": "file-sink"}
    default = (
        FileSinkBuilder().set_destination_resolver(lambda r, c: None).set_serializer(lambda r, c: r)
    )
    assert default.build().lineage == LineageSettings(facets=(("sink", "file-sink"),))


@pytest.mark.parametrize("count", [-1, 1.5, True, "10"])
def test_the_bound_is_an_int_of_at_least_zero(count):
    with pytest.raises(ConfigurationError, match=r"set_max_lineage_datasets\(\) takes an int"):
        FileSinkBuilder().set_max_lineage_datasets(count)


def test_a_listener_must_be_callable_and_picklable():
    with pytest.raises(ConfigurationError, match="set_lineage_listener"):
        FileSinkBuilder().set_lineage_listener("not a listener")
    lock = __import__("threading").Lock()
    builder = (
        FileSinkBuilder()
        .set_destination_resolver(lambda r, c: FileDestination.of("a"))
        .set_serializer(lambda r, c: r)
        .set_lineage_listener(lambda d: lock.acquire())
    )
    with pytest.raises(ConfigurationError, match="lineage listener"):
        builder.build()


def test_the_counter_is_declared_and_documented():
    assert LINEAGE_COUNTER in SINK_COUNTERS
    text = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    assert f"`pyflink_gcp.{LINEAGE_COUNTER}`" in text


def test_only_a_fixed_destination_is_known_when_the_job_is_built():
    settings = LineageSettings(facets=(("sink", "events-db"),))
    database = DatabaseDestination.of("p", "inst", "db")
    assert static_datasets(None, settings) == []
    [dataset] = static_datasets(database, settings)
    assert dataset.key == ("spanner", "p.inst.db") and dataset.facet("sink") == "events-db"
    assert static_datasets(database, LineageSettings(max_datasets=0)) == []
