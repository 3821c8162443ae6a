"""BigQuery's sink metrics read back through Flink's REST API from a running job: the names
``docs/metrics.md`` documents, the per-destination ``bytes`` counter, which a BigQuery writer
knows only once its sender encoded the rows (counted at each checkpoint's flush), and with
``BUFFERED_STREAM`` the committer's gauges."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    TableDestination,
    WriteMethod,
)
from pyflink_gcp.core.metrics import metric_identifier
from tests.e2e.metrics.test_rest_metrics import (
    SlowAfter,
    committer_metrics,
    free_port,
    per_destination,
    poll,
    poll_writer_metrics,
    rest_conf,
)
from tests.integration.bigquery.support import make_dataset, make_table
from tests.support.jobs import make_env, record_stream

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]

WRITTEN = 300


class Halves:
    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def __call__(self, i: int, ctx: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, "ab"[i % 2])


def row(i: int, ctx: Any) -> dict[str, Any] | None:
    if i >= WRITTEN:
        return None  # the job lives on, paced by SlowAfter, past the rows that count
    return {"id": i}


@pytest.mark.parametrize("method", [None, WriteMethod.BUFFERED_STREAM], ids=["default", "buffered"])
def test_bigquery_sink_metrics_and_per_destination_bytes(
    project: str, method: WriteMethod | None
) -> None:
    dataset = make_dataset(project, "metrics")
    for table in "ab":
        make_table(project, dataset, table, [("id", "INT64")])
    port = free_port()
    env = make_env(parallelism=1, checkpoint_ms=500, extra=rest_conf(port))
    builder = (
        BigQuerySink.builder()
        if method is None
        else BigQuerySink.builder().set_write_method(method)
    )
    sink = (
        builder.set_destination_resolver(Halves(project, dataset))
        .set_serializer(BigQuerySerializer.of(row, schema=[SchemaField("id", "INT64")]))
        .set_writer_options(
            BigQueryWriterOptions.builder()
            .per_destination_metrics(True)
            .max_buffered_records(50)
            .build()
        )
        .build()
    )
    record_stream(env, 1_000_000, SlowAfter(WRITTEN)).sink_to(sink)
    client = env.execute_async("bigquery sink metrics")
    job_id = str(client.get_job_id())
    try:
        # Every counted row is in, a checkpoint's flush counted their bytes, and the rows
        # after them, which the serializer skips, have begun to reach Flink's counters (those
        # come at bundle ends, so the first reading of the written rows may show none yet).
        _, got = poll_writer_metrics(
            port,
            job_id,
            lambda got: (
                got.get("pyflink_gcp.recordsWritten", 0) >= WRITTEN
                and got.get("pyflink_gcp.recordsSkipped", 0) > 0
                and len(per_destination(got, "bytes")) == 2
                and all(v > 0 for v in per_destination(got, "bytes").values())
            ),
        )
        # The committer's gauges reach Flink at its own bundle ends: after a commit or two.
        committer = (
            {}
            if method is None
            else poll(
                lambda: committer_metrics(port, job_id),
                lambda c: c.get("pyflink_gcp.committablesCommitted", 0) >= 2,
                60,
            )
        )
    finally:
        client.cancel().result()
    assert got["pyflink_gcp.recordsWritten"] == WRITTEN, got
    assert got["pyflink_gcp.recordsSkipped"] > 0, got
    assert {
        "pyflink_gcp.lastFlushMillis",
        "pyflink_gcp.checkpointMarkers",
        "pyflink_gcp.schemaUpdates",
        "pyflink_gcp.declaredSchemaTables",
        "pyflink_gcp.declaredSchemaChecks",
    } <= set(got), got
    assert got["pyflink_gcp.schemaUpdates"] == 0, got  # schema_update is off
    # A table is looked up after refusing the declared schema only if it was written by it.
    assert got["pyflink_gcp.declaredSchemaChecks"] <= got["pyflink_gcp.declaredSchemaTables"], got
    if method is not None:  # BUFFERED streams: every table is looked up
        assert got["pyflink_gcp.declaredSchemaTables"] == 0, got
    ids = {metric_identifier(f"projects/{project}/datasets/{dataset}/tables/{t}") for t in "ab"}
    assert set(per_destination(got, "records")) == ids, got
    assert sorted(per_destination(got, "records").values()) == [WRITTEN / 2, WRITTEN / 2], got
    # Each table's 150 INT64 rows, as encoded for AppendRows: a few bytes a row.
    assert all(150 <= v <= 150 * 12 for v in per_destination(got, "bytes").values()), got
    if method is not None:
        # A commit per completed checkpoint; each flushed the stream of both tables.
        assert committer["pyflink_gcp.commits"] > 0, committer
        assert committer["pyflink_gcp.committablesCommitted"] >= 2, committer
