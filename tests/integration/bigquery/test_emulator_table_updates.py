"""The emulator launcher's table updates behave as BigQuery's: a stale ``If-Match`` etag
answers 412, and columns a patch adds take values (the emulator alone changed only the
table's metadata)."""

from __future__ import annotations

import http.client
import json
import os
import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud.bigquery import SchemaField

from tests.integration.bigquery.support import (
    bq_client,
    make_dataset,
    make_table,
    query,
    schema_updates,
)

pytestmark = pytest.mark.integration


def test_a_stale_etag_is_refused_and_added_columns_take_values(project: str) -> None:
    dataset = make_dataset(project, "patch")
    make_table(project, dataset, "t", [("id", "INT64")])
    client = bq_client(project)
    try:
        first = client.get_table(f"{project}.{dataset}.t")
        second = client.get_table(f"{project}.{dataset}.t")
        first.schema = [*first.schema, SchemaField("note", "STRING")]
        updated = client.update_table(first, ["schema"])
        assert [f.name for f in updated.schema] == ["id", "note"]
        assert updated.etag != second.etag
        second.schema = [*second.schema, SchemaField("other", "STRING")]
        with pytest.raises(gexc.PreconditionFailed):
            client.update_table(second, ["schema"])
        # A patch of anything else is no schema update.
        updated.description = "orders"
        client.update_table(updated, ["description"])
        client.query(f"INSERT INTO `{project}.{dataset}.t` (id, note) VALUES (1, 'added')").result()
    finally:
        client.close()
    assert query(project, f"SELECT id, note FROM `{project}.{dataset}.t`") == [
        {"id": 1, "note": "added"}
    ]
    assert schema_updates()[f"{project}.{dataset}.t"] == 1


def test_patches_of_one_etag_whose_bodies_arrive_late_make_one_update(project: str) -> None:
    # Two subtasks patch a table they read at once, and their request bodies reach the server
    # after both headers did (a loaded machine). BigQuery applies one patch and answers the
    # other 412. The launcher's etag check waits for the body; without a lock around the check
    # and the update, both passed the check first and both patches applied.
    dataset = make_dataset(project, "late")
    make_table(project, dataset, "t", [("id", "INT64")])
    host = os.environ["BIGQUERY_EMULATOR_HOST"]
    path = f"/bigquery/v2/projects/{project}/datasets/{dataset}/tables/t"
    reader = http.client.HTTPConnection(host, timeout=10)
    reader.request("GET", path)
    etag = json.load(reader.getresponse())["etag"]
    reader.close()
    connections = []
    bodies = []
    for column in ("a", "b"):
        body = json.dumps(
            {
                "schema": {
                    "fields": [
                        {"name": "id", "type": "INTEGER", "mode": "NULLABLE"},
                        {"name": column, "type": "STRING", "mode": "NULLABLE"},
                    ]
                }
            }
        ).encode()
        connection = http.client.HTTPConnection(host, timeout=10)
        connection.putrequest("PATCH", path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.putheader("If-Match", etag)
        connection.endheaders()
        connections.append(connection)
        bodies.append(body)
    time.sleep(0.5)  # Both handlers run up to their read of the body.
    statuses = []
    for connection, body in zip(connections, bodies, strict=True):
        connection.send(body)
    for connection in connections:
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
        connection.close()
    assert sorted(statuses) == [200, 412]
    assert schema_updates()[f"{project}.{dataset}.t"] == 1
