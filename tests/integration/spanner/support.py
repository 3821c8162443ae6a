"""Test helpers for the Spanner sink: the emulator's database, unique tables, SQL read-back."""

from __future__ import annotations

import functools
import os
import uuid
import warnings
from typing import Any

from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.spanner import DatabaseDestination, SpannerWriterOptions
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory

PROJECT = "test-project"


def unique(prefix: str) -> str:
    """A fresh table name (tables are never reused between tests)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def destination() -> DatabaseDestination:
    """The stack's database."""
    return DatabaseDestination.of(
        PROJECT, os.environ["SPANNER_INSTANCE"], os.environ["SPANNER_DATABASE"]
    )


def database() -> Any:
    """A client ``Database`` of the stack's database (the client honours SPANNER_EMULATOR_HOST)."""
    return _database(
        os.environ["SPANNER_EMULATOR_HOST"],
        os.environ["SPANNER_INSTANCE"],
        os.environ["SPANNER_DATABASE"],
    )


@functools.lru_cache(maxsize=4)
def _database(host: str, instance: str, name: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from google.cloud import spanner

        client = spanner.Client(project=PROJECT, disable_builtin_metrics=True)
    return client.instance(instance).database(name)


def create_tables(statements: list[str]) -> None:
    """Run DDL and wait for it."""
    database().update_ddl(statements).result(120)


def query(sql: str) -> list[list[Any]]:
    """Rows of one SQL statement, read with a strong single-use snapshot."""
    with database().snapshot() as snapshot:
        return [list(row) for row in snapshot.execute_sql(sql)]


def open_writer(
    options: SpannerWriterOptions | None = None,
    *,
    fail_fast: bool = False,
    factory_class: type[SpannerWriterFactory] = SpannerWriterFactory,
    subtask: int = 0,
) -> tuple[SpannerWriterFactory, SpannerWriter]:
    """A factory opened like on a worker, and its one writer."""
    factory = factory_class(
        sink_name="spanner-test",
        database=destination(),
        options=options or SpannerWriterOptions(),
        fail_fast=fail_fast,
    )
    factory.open(SubtaskInfo("spanner-test", subtask_index=subtask, number_of_parallel_subtasks=2))
    return factory, factory.create_writer(destination())
