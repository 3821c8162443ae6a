"""The SQL connectors' option list: its shape, its defaults (the DataStream ones), its parser."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta

import pytest

from pyflink_gcp.bigquery import BigQueryWriterOptions
from pyflink_gcp.bigtable import BigtableWriterOptions
from pyflink_gcp.cloudtasks import CloudTasksWriterOptions
from pyflink_gcp.pubsub import PubSubPublisherOptions, PubSubWriterOptions
from pyflink_gcp.spanner import SpannerWriterOptions
from pyflink_gcp.table.option_model import KINDS, OptionError
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.parsing import duration_expected, parse

KEY = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*(\.[a-z][a-z0-9]*(-[a-z0-9]+)*)*$")
COLUMNS = ("id", "region", "payload")


def test_every_key_follows_flinks_connector_convention_and_has_a_valid_kind():
    for connector in CONNECTORS.values():
        keys = [o.key for o in connector.options]
        assert len(keys) == len(set(keys)), connector.identifier
        for option in connector.options:
            assert KEY.match(option.key), option.key
            assert option.kind in KINDS, option.key
            assert (option.kind == "enum") == bool(option.choices), option.key
            assert not (option.required and option.default is not None), option.key


def test_the_required_keys_are_the_issues():
    required = {i: {o.key for o in c.options if o.required} for i, c in CONNECTORS.items()}
    assert required == {
        "gcp-pubsub": {"project", "topic"},
        "gcp-bigquery": {"project", "dataset", "table"},
        "gcp-bigtable": {"project", "instance", "table", "row-key", "column-family"},
        "gcp-cloudtasks": {"project", "location", "queue", "url"},
        "gcp-spanner": {"project", "instance", "database", "table"},
    }


@pytest.mark.parametrize(
    ("identifier", "writer_type"),
    [
        ("gcp-pubsub", PubSubWriterOptions),
        ("gcp-bigquery", BigQueryWriterOptions),
        ("gcp-bigtable", BigtableWriterOptions),
        ("gcp-cloudtasks", CloudTasksWriterOptions),
        ("gcp-spanner", SpannerWriterOptions),
    ],
)
def test_defaults_are_the_datastream_defaults(identifier, writer_type):
    """Every option mapping to a writer option field has that field's default, and every
    shared field of the service's options has an option."""
    defaults = {f.name: f.default for f in fields(writer_type)}
    required = {o.key: "x" for o in CONNECTORS[identifier].options if o.required}
    values = parse(identifier, required, ("x",))
    checked = 0
    for option in CONNECTORS[identifier].options:
        target = option.maps_to or ""
        if target.startswith("writer."):
            field = target.removeprefix("writer.")
            assert field in defaults, option.key
            assert values[option.key] == defaults[field], option.key
            checked += 1
    assert checked >= 5
    mapped = {(o.maps_to or "").removeprefix("writer.") for o in CONNECTORS[identifier].options}
    shared = {"max_buffer_time", "max_buffered_records", "retry_deadline"}
    shared |= {"max_in_flight_requests", "per_destination_metrics"}
    creation = ("max_created_destinations", "max_created_destinations_per")
    for field in ("idle_timeout", "max_active_destinations", *creation):
        if field in defaults and (field not in creation or "create-disposition" in values):
            shared.add(field)
    assert shared <= mapped, shared - mapped


@pytest.mark.parametrize("identifier", ["gcp-pubsub", "gcp-bigquery", "gcp-bigtable"])
def test_the_creation_bound_is_a_count_per_window_as_in_the_datastream_sinks(identifier):
    from pyflink_gcp.table.adapter import writer_options

    required = {o.key: "x" for o in CONNECTORS[identifier].options if o.required}
    defaults = parse(identifier, required, ("x",))
    assert defaults["sink.max-created-destinations"] == 500
    assert defaults["sink.max-created-destinations.per"] == timedelta(hours=1)
    values = parse(
        identifier,
        {
            **required,
            "sink.max-created-destinations": "40",
            "sink.max-created-destinations.per": "1d",
        },
        ("x",),
    )
    writer_type = {
        "gcp-pubsub": PubSubWriterOptions,
        "gcp-bigquery": BigQueryWriterOptions,
        "gcp-bigtable": BigtableWriterOptions,
    }[identifier]
    built = writer_options(identifier, values, writer_type)
    assert (built.max_created_destinations, built.max_created_destinations_per) == (
        40,
        timedelta(days=1),
    )
    with pytest.raises(OptionError, match="sink.max-created-destinations.per"):
        parse(identifier, {**required, "sink.max-created-destinations.per": "0ms"}, ("x",))


def test_publisher_defaults_are_the_datastream_defaults():
    values = parse("gcp-pubsub", {"project": "p", "topic": "t"}, ())
    publisher = PubSubPublisherOptions()
    assert values["publisher.max-messages"] == publisher.max_messages
    assert values["publisher.max-bytes"] == publisher.max_bytes


def test_parse_types_every_kind():
    values = parse(
        "gcp-pubsub",
        {
            "connector": "gcp-pubsub",
            "project": "p",
            "topic": "t-{region}",
            "sink.buffer-flush.max-rows": "500",
            "sink.buffer-flush.interval": "250ms",
            "sink.idle-timeout": "0ms",
            "sink.retry-deadline": "3 min",
            "sink.per-destination-metrics": "TRUE",
            "payload.format": "raw",
            "payload.column": "payload",
            "attributes.columns": "id, region",
        },
        COLUMNS,
    )
    assert values["topic"] == "t-{region}"
    assert values["sink.buffer-flush.max-rows"] == 500
    assert values["sink.buffer-flush.interval"] == timedelta(milliseconds=250)
    assert values["sink.idle-timeout"] == timedelta(0)
    assert values["sink.retry-deadline"] == timedelta(minutes=3)
    assert values["sink.per-destination-metrics"] is True
    assert values["attributes.columns"] == ("id", "region")
    assert values["sink.max-active-destinations"] is None  # unset, no default


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("sink.buffer-flush.max-rows", "many", "an integer >= 1"),
        ("sink.buffer-flush.max-rows", "0", "an integer >= 1"),
        ("publisher.max-messages", "1001", "an integer in [1, 1000]"),
        (
            "sink.buffer-flush.interval",
            "10",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at least 1ms",
        ),
        (
            "sink.buffer-flush.interval",
            "0s",
            "a duration such as 500ms, 10s, 5min, 1h or 1d of at least 1ms",
        ),
        ("sink.idle-timeout", "soon", "a duration such as 500ms, 10s, 5min, 1h or 1d"),
        ("sink.per-destination-metrics", "yes", "true or false"),
        ("failure-handler", "retry", "one of fail, drop, dead-letter"),
        ("ordering-key.column", "customer", "a column of the table (id, region, payload)"),
    ],
)
def test_a_bad_value_names_the_option_the_connector_and_what_is_expected(key, value, expected):
    raw = {"project": "p", "topic": "t", key: value}
    shown = "customer" if key == "ordering-key.column" else value
    with pytest.raises(OptionError) as error:
        parse("gcp-pubsub", raw, COLUMNS)
    assert str(error.value) == (
        f"Invalid value for option '{key}' of connector 'gcp-pubsub': expected {expected}, "
        f"got '{shown}'."
    )


def test_unknown_and_missing_keys_and_conditional_requirements():
    with pytest.raises(OptionError, match=r"Unsupported options found for 'gcp-pubsub': tpoic\."):
        parse("gcp-pubsub", {"project": "p", "topic": "t", "tpoic": "x"}, ())
    with pytest.raises(OptionError, match=r"Missing required options for 'gcp-bigquery': table\."):
        parse("gcp-bigquery", {"project": "p", "dataset": "d"}, ())
    with pytest.raises(OptionError) as error:
        parse("gcp-pubsub", {"project": "p", "topic": "t", "failure-handler": "dead-letter"}, ())
    assert str(error.value) == (
        "Option 'dead-letter.topic' of connector 'gcp-pubsub' is required when "
        "'failure-handler' is 'dead-letter'."
    )


@pytest.mark.parametrize(
    ("low", "high", "bounds"),
    [
        (0, None, ""),
        (1, None, " of at least 1ms"),
        (0, 500, " of at most 500ms"),
        (1, 500, " of at least 1ms and at most 500ms"),
        (100, 500, " of at least 100ms and at most 500ms"),
    ],
)
def test_a_duration_names_the_bounds_beyond_its_syntax(low, high, bounds):
    # The Java factories word it alike (TableOptions.durationExpected).
    expected = "a duration such as 500ms, 10s, 5min, 1h or 1d" + bounds
    assert duration_expected(low, high) == expected
