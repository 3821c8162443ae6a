"""How a cut request is encoded: one Arrow record batch, or protobuf rows for a request of a
few rows (an Arrow batch's fixed cost), for rows Arrow does not take as given, and by size."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.batch import ARROW_MIN_ROWS, Batch, encode_requests
from pyflink_gcp.bigquery.tables import TableLayout

LAYOUT = TableLayout.of([SchemaField("id", "INT64"), SchemaField("name", "STRING")])


def _encode(rows: list[dict[str, Any]], max_bytes: int = 100_000) -> list[Batch]:
    batch = Batch(None, rows, [f"r{row['id']}" for row in rows], False)
    encoded, failed = encode_requests(
        batch,
        LAYOUT,
        max_bytes,
        lambda *a: (_ for _ in ()).throw(AssertionError(a)),
        lambda *a: (_ for _ in ()).throw(AssertionError(a)),
    )
    assert failed == []
    return encoded


def _ids(batch: Batch) -> list[int]:
    if batch.arrow is not None:
        assert LAYOUT.arrow is not None
        data = LAYOUT.arrow.serialized_schema + batch.arrow
        return [row["id"] for row in pa.ipc.open_stream(data).read_all().to_pylist()]
    assert batch.rows is not None and len(batch.rows) == len(batch.elements)
    return [row["id"] for row in batch.elements]


def test_a_request_of_a_few_rows_goes_as_protobuf_rows_and_a_larger_one_as_arrow() -> None:
    few = [{"id": i, "name": "x"} for i in range(ARROW_MIN_ROWS - 1)]
    [small] = _encode(few)
    assert small.arrow is None and small.rows is not None
    assert small.rows == [LAYOUT.encoder.encode(row) for row in few]
    enough = [{"id": i, "name": "x"} for i in range(ARROW_MIN_ROWS)]
    [large] = _encode(enough)
    assert large.arrow is not None and large.rows is None
    assert _ids(large) == list(range(ARROW_MIN_ROWS))


def test_an_arrow_batch_over_the_size_is_halved_and_halves_of_a_few_rows_go_as_protobuf() -> None:
    rows = [{"id": i, "name": "x" * 50} for i in range(2 * ARROW_MIN_ROWS)]
    [whole] = _encode(rows)
    assert whole.arrow is not None
    # Room for half of the rows: two Arrow batches.
    halves = _encode(rows, max_bytes=len(whole.arrow) * 3 // 4)
    assert [b.arrow is not None for b in halves] == [True, True]
    assert [i for b in halves for i in _ids(b)] == list(range(2 * ARROW_MIN_ROWS))
    # Room for a quarter: the quarters are too few rows for Arrow, and go as protobuf rows.
    quarters = _encode(rows, max_bytes=len(whole.arrow) * 3 // 8)
    assert all(b.arrow is None for b in quarters) and len(quarters) >= 4
    assert [i for b in quarters for i in _ids(b)] == list(range(2 * ARROW_MIN_ROWS))
