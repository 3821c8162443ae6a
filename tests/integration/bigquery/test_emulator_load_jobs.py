"""Load jobs in the emulator read ``gs://`` objects uploaded to the GCS emulator, and a job id
runs once (the launcher's patch): jobs.insert with an existing id answers 409 like BigQuery.

The stack points bqemulator's ``BQEMU_GCS_LOCAL_ROOT`` at the GCS emulator's object directory, so
``gs://<bucket>/<name>`` is the object ``<name>`` of bucket ``<bucket>`` uploaded over its API.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery, storage  # type: ignore[attr-defined]

from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.bigquery.support import bq_client, unique

pytestmark = pytest.mark.integration

TIMEOUT = 10.0

_ROWS = [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}, {"id": 3, "name": "three"}]
_SCHEMA = [bigquery.SchemaField("id", "INT64"), bigquery.SchemaField("name", "STRING")]


@pytest.fixture
def bucket(stack: EmulatorStack) -> Iterator[storage.Bucket]:
    gcs = storage.Client(
        project=stack.project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": stack.env["STORAGE_EMULATOR_HOST"]},
    )
    yield gcs.create_bucket(unique("load-jobs").replace("_", "-"), timeout=TIMEOUT)
    gcs.close()


@pytest.fixture
def bq(project: str) -> Iterator[bigquery.Client]:
    client = bq_client(project)
    yield client
    client.close()


def _rows(bq: bigquery.Client, table: str) -> list[dict[str, object]]:
    sql = f"SELECT id, name FROM `{table}` ORDER BY id"
    return [dict(r.items()) for r in bq.query(sql, timeout=TIMEOUT).result(timeout=30)]


def _load_twice(bq: bigquery.Client, project: str, uri: str, source_format: str) -> None:
    """Loads ``uri`` with a fixed job id, then again with that id: the second is refused."""
    dataset = bq.create_dataset(unique("load"), timeout=TIMEOUT)
    table = f"{project}.{dataset.dataset_id}.t"
    job_id = unique("load_job")
    config = bigquery.LoadJobConfig(source_format=source_format, schema=_SCHEMA)

    first = bq.load_table_from_uri(uri, table, job_id=job_id, job_config=config, timeout=TIMEOUT)
    first.result(timeout=30)
    assert first.output_rows == 3
    assert _rows(bq, table) == _ROWS

    with pytest.raises(exceptions.Conflict) as refused:
        bq.load_table_from_uri(uri, table, job_id=job_id, job_config=config, timeout=TIMEOUT)
    message = f"Already Exists: Job {project}:US.{job_id}"
    assert refused.value.errors[0]["reason"] == "duplicate"
    assert refused.value.errors[0]["message"] == message
    assert refused.value.response is not None
    assert refused.value.response.json()["error"]["status"] == "ALREADY_EXISTS"
    assert _rows(bq, table) == _ROWS

    kept = bq.get_job(job_id, timeout=TIMEOUT)
    assert isinstance(kept, bigquery.LoadJob)
    assert kept.state == "DONE" and kept.error_result is None
    assert kept.created == first.created and kept.output_rows == 3


def test_ndjson_load_from_gcs_runs_a_job_id_once(
    bq: bigquery.Client, bucket: storage.Bucket, project: str
) -> None:
    ndjson = "".join(json.dumps(row) + "\n" for row in _ROWS)
    bucket.blob("in/rows.json").upload_from_string(
        ndjson, content_type="application/json", timeout=TIMEOUT
    )
    uri = f"gs://{bucket.name}/in/rows.json"
    _load_twice(bq, project, uri, bigquery.SourceFormat.NEWLINE_DELIMITED_JSON)


def test_parquet_load_from_gcs_runs_a_job_id_once(
    bq: bigquery.Client, bucket: storage.Bucket, project: str
) -> None:
    # The emulator inserts ``SELECT *`` from the file: columns match the schema by position
    # (BigQuery matches them by name), so the file's columns are in the schema's order.
    data = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(_ROWS), data)
    bucket.blob("in/rows.parquet").upload_from_string(
        data.getvalue(), content_type="application/octet-stream", timeout=TIMEOUT
    )
    uri = f"gs://{bucket.name}/in/rows.parquet"
    _load_twice(bq, project, uri, bigquery.SourceFormat.PARQUET)
