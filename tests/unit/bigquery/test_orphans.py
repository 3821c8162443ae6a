"""The sweep of staged objects that failed attempts left named by no committable: which objects
it deletes, and when it may run (on a local staging directory)."""

from __future__ import annotations

import uuid
from pathlib import Path

from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.bigquery.orphans import OrphanSweep
from pyflink_gcp.bigquery.staging import open_staging
from pyflink_gcp.core.retry import RetryPolicy


def staged(root: Path, sink: str, subtask: int, attempt: int, table: str = "p.d.t") -> str:
    name = f"{table}/part-{sink}-{subtask}-{attempt}-{uuid.uuid4().hex}.parquet.pending"
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(b"x")
    return f"file://{root / name}"


def test_objects_of_earlier_attempts_named_by_nothing_are_deleted(tmp_path: Path) -> None:
    root = tmp_path / "stage"
    orphan = staged(root, "s", 0, 0)
    orphan_other_table = staged(root, "s", 1, 1, table="p.d.u")
    kept = staged(root, "s", 1, 0)  # an earlier attempt's, named by a kept committable
    current = staged(root, "s", 0, 2)  # this attempt's, maybe not named yet
    other_sink = staged(root, "other", 0, 0)
    prefixed_sink = staged(root, "s-x", 0, 0)  # a sink whose name starts like this one's
    staging = open_staging(
        BigQueryFileLoadsOptions(staging_location=str(root)), RetryPolicy(deadline_s=5), "s"
    )
    sweep = OrphanSweep("s", "part", attempt=2)

    sweep.sweep(staging, [kept])

    assert sorted(sweep.deleted) == sorted([orphan, orphan_other_table])
    left = {f"file://{p}" for p in root.rglob("*.pending")}
    assert left == {kept, current, other_sink, prefixed_sink}
    assert sweep.done
