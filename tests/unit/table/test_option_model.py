"""What a SQL connector option is and the resource the Java factories read: its document, the
writer and committer functions it names, the commit tag."""

from __future__ import annotations

import json

from pyflink_gcp.table import option_model
from pyflink_gcp.table.options import CONNECTORS, resource
from pyflink_gcp.table.parsing import parse


def test_the_resource_is_what_the_java_factories_read():
    files = resource("marker line")  # what the bridge build calls
    document = json.loads(files[option_model.RESOURCE])
    assert document["writer_module"] == "pyflink_gcp.table"
    assert document["writer_name"] == "create_writer"
    assert document["non_retriable_marker"] == "marker line"
    assert document["time_roots"] == ["event_time", "processing_time"]
    assert set(document["connectors"]) == set(CONNECTORS)
    topic = next(o for o in document["connectors"]["gcp-pubsub"]["options"] if o["key"] == "topic")
    assert topic["kind"] == "template" and topic["required"] is True
    assert files[option_model.SERVICES].split() == [c.factory_class for c in CONNECTORS.values()]


def test_the_writer_factory_is_a_top_level_name_of_the_package():
    import pyflink_gcp.table

    module, name = option_model.WRITER_FACTORY.split(":")
    assert "." not in name
    assert getattr(pyflink_gcp.table, name) is pyflink_gcp.table.create_writer
    assert module == pyflink_gcp.table.__name__


def test_the_committing_write_methods_and_the_commit_tag_are_the_datastream_sinks():
    """The Java sink adds the committer for exactly the methods whose writer factory commits,
    at that factory's committer parallelism, with the committer's tag."""
    from pyflink_gcp.core.commit import COMMIT_TAG, CommittingWriterFactory
    from pyflink_gcp.table.bigquery import build_sink
    from pyflink_gcp.table.rows import Column, TableInfo

    document = json.loads(
        option_model.resource_files(CONNECTORS.values(), "m")[option_model.RESOURCE]
    )
    assert document["commit_tag"] == COMMIT_TAG
    assert (document["committer_module"], document["committer_name"]) == (
        "pyflink_gcp.table",
        "create_committer",
    )
    committing = document["connectors"]["gcp-bigquery"]["committing"]
    assert committing["key"] == "write-method"
    table = TableInfo("t", (Column("id", {"root": "BIGINT", "nullable": True, "sql": "BIGINT"}),))
    for method in CONNECTORS["gcp-bigquery"].option("write-method").choices:
        raw = {"project": "p", "dataset": "d", "table": "t", "write-method": method}
        raw["file-loads.staging-location"] = "file:///tmp/stage"
        factory = build_sink(parse("gcp-bigquery", raw, ("id",)), table)._sink_config().factory
        if isinstance(factory, CommittingWriterFactory):
            assert committing["values"][method] == (factory.committer_parallelism or 0), method
        else:
            assert method not in committing["values"]
    assert all(
        c["committing"] is None for i, c in document["connectors"].items() if i != "gcp-bigquery"
    )
