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
    LINEAGE_STATE_PARAMETER,
    LINEAGE_STATE_TAG,
    LineageReporter,
    LineageSettings,
    dataset_of,
    restored_state,
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


# -- across restores: the state the marker operator keeps --------------------------------------


def _kept(*elements: Any, protocol: int = pickle.DEFAULT_PROTOCOL) -> str:
    """A :data:`LINEAGE_STATE_PARAMETER` value, as the bridge's operator hands it back: each
    element as PyFlink pickled it, base64, comma-separated."""
    import base64

    return ",".join(base64.b64encode(pickle.dumps(e, protocol=protocol)).decode() for e in elements)


def _topic(name: str) -> tuple[str, str]:
    return ("pubsub", f"topic:p:{name}")


def test_the_operator_keeps_what_was_reported_since_the_last_marker():
    listener = Recorder()
    reporter, _ = _reporter(listener)
    reporter.restore("")  # a first start under the bridge's operator: nothing kept yet
    assert reporter.take_state() is None
    for topic in ["t01", "t02", "t01"]:
        reporter.resolved(TopicDestination.of("p", topic))
    assert reporter.take_state() == (LINEAGE_STATE_TAG, (_topic("t01"), _topic("t02")), False)
    assert reporter.take_state() is None  # nothing new
    reporter.resolved(TopicDestination.of("p", "t03"))
    assert reporter.take_state() == (LINEAGE_STATE_TAG, (_topic("t03"),), False)


def test_a_restored_subtask_reports_only_what_it_had_not_reported(caplog):
    caplog.set_level(logging.INFO, logger="pyflink_gcp.lineage")
    listener = Recorder()
    reporter, group = _reporter(listener)
    kept = _kept(
        (LINEAGE_STATE_TAG, (_topic("t01"), _topic("t02")), False),
        (LINEAGE_STATE_TAG, (_topic("t03"),), False),
    )
    reporter.restore(kept)
    assert reporter.restored == 3 == reporter.reported
    for topic in ["t01", "t02", "t03", "t04", "t01", "t04"]:
        reporter.resolved(TopicDestination.of("p", topic))
    assert [e for e in listener.events if e[0] == "dataset"] == [
        ("dataset", "pubsub:topic:p:t04", "orders")
    ]
    assert group.registry[LINEAGE_COUNTER].count == 1
    # Only the new dataset is handed over: the operator still holds the restored ones.
    assert reporter.take_state() == (LINEAGE_STATE_TAG, (_topic("t04"),), False)
    restored = [r.getMessage() for r in caplog.records if "restored" in r.getMessage()]
    assert restored == [
        "orders: subtask 3 restored 3 lineage datasets it reported before; they are not "
        "reported again"
    ]


def test_the_bound_counts_the_restored_datasets_and_its_notice_is_kept_too():
    listener = Recorder()
    reporter, _ = _reporter(listener, limit=3)
    reporter.restore(_kept((LINEAGE_STATE_TAG, (_topic("t01"), _topic("t02")), False)))
    for topic in ["t03", "t04", "t05"]:
        reporter.resolved(TopicDestination.of("p", topic))
    assert [e for e in listener.events if e[0] != "open"] == [
        ("dataset", "pubsub:topic:p:t03", "orders"),
        ("limit", 3),
    ]
    state = reporter.take_state()
    assert state == (LINEAGE_STATE_TAG, (_topic("t03"),), True)
    # Restored with the bound reached, a subtask says nothing more, not even that.
    again, _ = _reporter(listener := Recorder(), limit=3)
    again.restore(_kept((LINEAGE_STATE_TAG, (_topic("t01"), _topic("t02")), False), state))
    again.resolved(TopicDestination.of("p", "t09"))
    assert listener.events == [("open", 3)] and again.limit_reached
    assert again.take_state() is None
    # A bound lowered since: the restored datasets beyond it count as the bound reached.
    lower, _ = _reporter(Recorder(), limit=1)
    lower.restore(_kept((LINEAGE_STATE_TAG, (_topic("t01"), _topic("t02")), False)))
    assert lower.reported == 1 and lower.limit_reached


def test_without_the_operators_state_nothing_is_kept_and_each_attempt_reports_anew():
    reporter, _ = _reporter(Recorder())
    reporter.restore(None)  # PyFlink's own operator hands over no parameter
    reporter.resolved(TopicDestination.of("p", "t01"))
    assert reporter.reported == 1 and reporter.take_state() is None
    off, _ = _reporter(Recorder(), limit=0)
    off.restore(_kept((LINEAGE_STATE_TAG, (_topic("t01"),), False)))
    assert off.take_state() is None and off.reported == 0


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_restored_elements_are_read_whatever_the_pickle_protocol_and_a_bad_one_is_skipped(
    protocol, caplog
):
    good = (LINEAGE_STATE_TAG, (_topic("t01"),), False)
    value = ",".join([_kept(good, protocol=protocol), "bm90IGEgcGlja2xl", _kept(("other", (), 1))])
    assert restored_state(value, "orders") == ([_topic("t01")], False)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2
    assert restored_state("") == ([], False)


def test_the_element_starts_with_the_tag_where_the_bridge_looks_for_it():
    """The Java ``LineageState.isElement`` skips the PROTO and FRAME opcodes and expects the
    tag as the first item's string; PyFlink pickles with ``pickle`` or ``cloudpickle``."""
    import cloudpickle

    element = (LINEAGE_STATE_TAG, (_topic("t01"),), True)
    tag = LINEAGE_STATE_TAG.encode()
    for dumped in (pickle.dumps(element), cloudpickle.dumps(element)):
        assert dumped[:1] == b"\x80" and dumped[2:3] == b"\x95"  # PROTO, FRAME
        assert dumped[11 : 13 + len(tag)] == b"\x8c" + bytes([len(tag)]) + tag
    java = (
        Path(__file__).resolve().parents[3]
        / "java-bridge/src/main/java/dev/pyflinkgcp/bridge/LineageState.java"
    ).read_text()
    assert 'TAG = "\\u0000pyflink-gcp:lineage"' in java
    assert f'PARAMETER = "{LINEAGE_STATE_PARAMETER}"' in java


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
