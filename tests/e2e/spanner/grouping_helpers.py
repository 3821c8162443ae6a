"""Picklable pieces of the Spanner grouping e2e job (imported by the Python workers)."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.spanner import Mutation
from pyflink_gcp.spanner.grouping import GroupingSpannerWriter
from tests.e2e.spanner.helpers import RecordingFactory
from tests.support.jsonl import append_json

#: Distinct keys of the job; records KEYS.. rewrite or delete the first REWRITES of them.
KEYS = 4_000
REWRITES = 2_000


def key_of(i: int) -> int:
    """Record ``i``'s key: a permutation of [0, KEYS), so keys arrive out of order."""
    return (i % KEYS) * 1_373 % KEYS


def plan(i: int) -> tuple[int, str]:
    """Record ``i``'s key and what it does: ``write`` (first value), ``rewrite``, ``delete``."""
    if i < KEYS:
        return key_of(i), "write"
    j = i - KEYS
    return key_of(j), "delete" if j % 4 == 0 else "rewrite"


def to_record(i: int) -> dict[str, Any]:
    k, what = plan(i)
    return {"i": i, "k": k, "what": what}


def by_key(record: dict[str, Any]) -> int:
    return int(record["k"])


class ThreeTables:
    """Routes key ``k`` to one of three tables by ``k % 3``: an INT64 key, a (STRING, INT64)
    key, a STRING key."""

    def __init__(self, tables: list[str]) -> None:
        self.tables = tables

    def row(self, k: int) -> tuple[str, dict[str, Any]]:
        table = self.tables[k % 3]
        if k % 3 == 0:
            return table, {"id": k}
        if k % 3 == 1:
            return table, {"region": f"r{k % 5}", "num": k}
        return table, {"name": f"k{k:05d}"}

    def serialize(self, record: dict[str, Any], context: Any) -> Mutation:
        table, key = self.row(record["k"])
        if record["what"] == "delete":
            return Mutation.delete(table, tuple(key.values()))
        version = 1 if record["what"] == "write" else 2
        return Mutation.insert_or_update(table, {**key, "k": record["k"], "version": version})


class LoggingGroupingWriter(GroupingSpannerWriter):
    """Logs the rows of every commit it makes: per row, its table and its key values."""

    log_path = ""

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        super()._commit_rpc(request, records, mutations)
        rows = []
        for m in request.mutations:
            op = m.WhichOneof("operation")
            body = getattr(m, op)
            if op == "delete":
                rows += [
                    [body.table, [v.string_value for v in key.values]] for key in body.key_set.keys
                ]
            else:
                width = 2 if "region" in body.columns else 1
                rows += [
                    [body.table, [v.string_value for v in r.values[:width]]] for r in body.values
                ]
        append_json(self.log_path, {"rows": rows, "groups": self.groups})


class LoggingGroupingFactory(RecordingFactory):
    """A factory whose grouping writers log their commits to ``log_path``."""

    writer_class = LoggingGroupingWriter
