"""The emulator launcher's table updates behave as BigQuery's: a stale ``If-Match`` etag
answers 412, and columns a patch adds take values (the emulator alone changed only the
table's metadata)."""

from __future__ import annotations

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
