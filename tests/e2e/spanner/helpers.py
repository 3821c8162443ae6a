"""Picklable pieces of the Spanner e2e jobs (imported by the Python workers by reference)."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.core import FailedRecord
from pyflink_gcp.spanner import Mutation
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory
from tests.support.jobs import pause
from tests.support.jsonl import append_json

KINDS = ("click", "view", "buy", "share")
#: Rows seeded before the job; records 100..199 delete SEED + i.
SEED = 1_000_000


def plan(i: int) -> str:
    """What record ``i`` of the main job does (the serializer and the test's expectations)."""
    if i in (1_234, 3_301):
        return "wrong-type"
    if i in (2_221, 3_302):
        return "null-kind"
    if i % 7 == 3:
        return "skip"
    if i % 10 == 0:
        return "audit"
    if i % 13 == 5:
        return "write-then-delete"
    if 100 <= i < 200:
        return "event-and-delete-seed"
    return "event"


def event_row(i: int) -> dict[str, Any]:
    return {"id": i, "kind": KINDS[i % 4], "score": i / 4, "n": i}


def slow_record(i: int, until: str | None = None) -> dict[str, Any]:
    """The main job's records, ~3 ms apart so that checkpoints complete along the way, until
    the file ``until`` (the injected failure's marker) exists."""
    pause(0.003, until)
    return {"i": i}


class EventSerializer:
    """Audit records to the audit table, everything else to the events table."""

    def __init__(self, events: str, audit: str) -> None:
        self.events = events
        self.audit = audit

    def serialize(self, record: dict[str, Any], context: Any) -> Any:
        i = record["i"]
        what = plan(i)
        if what == "skip":
            return None
        if what == "audit":
            return Mutation.insert_or_update(self.audit, {"id": i, "who": f"user{i % 5}"})
        if what == "write-then-delete":
            return [
                Mutation.insert_or_update(self.events, event_row(i)),
                Mutation.delete(self.events, i),
            ]
        if what == "wrong-type":
            return Mutation.insert_or_update(self.events, {**event_row(i), "n": i + 0.5})
        if what == "null-kind":
            return Mutation.insert_or_update(self.events, {**event_row(i), "kind": None})
        if what == "event-and-delete-seed":
            return [
                Mutation.insert_or_update(self.events, event_row(i)),
                Mutation.delete(self.events, SEED + i),
            ]
        return Mutation.insert_or_update(self.events, event_row(i))


class RecordingWriter(SpannerWriter):
    """Logs every commit (its mutation count) and every batch that completed (its records)."""

    log_path = ""

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        super()._commit_rpc(request, records, mutations)
        append_json(self.log_path, {"commit": mutations, "records": records})

    def _commit_batch(self, batch: Any) -> list[FailedRecord]:
        failures = super()._commit_batch(batch)
        ids = [record["i"] for _, record in batch.entries]
        append_json(self.log_path, {"batch": ids})
        return failures


class RecordingFactory(SpannerWriterFactory):
    """A factory whose writers log their commits to ``log_path``."""

    log_path = ""
    _config_fields = (*SpannerWriterFactory._config_fields, "log_path")
    #: The writer class it creates; a subclass names its own.
    writer_class: Any = RecordingWriter

    @classmethod
    def replacing(cls, factory: SpannerWriterFactory, log_path: str) -> Any:
        recording = cls(
            sink_name=factory.sink_name,
            database=factory.database,
            options=factory.options,
            endpoint=factory.endpoint,
            fail_fast=factory.fail_fast,
        )
        recording.log_path = log_path
        return recording

    def create_writer(self, destination: Any, writer_type: Any = None) -> SpannerWriter:
        writer = super().create_writer(destination, self.writer_class)
        assert isinstance(writer, self.writer_class)
        writer.log_path = self.log_path
        return writer
