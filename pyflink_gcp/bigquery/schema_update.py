"""Schema evolution: the columns a serializer's schema adds to a table, and the table update.

A job upgraded to write more columns (a v2 serializer whose ``schema(destination)`` names
columns the tables of v1 lack) would otherwise have every row refused. With
``BigQueryWriterOptions.schema_update`` the sink compares, when it opens a table's writer, the
schema the serializer gives the table with the table's own, and patches the table before the
writer encodes a row: the writer's encoders are then built from the updated table.

What BigQuery allows a schema update to do, and so what :func:`merged_schema` does:

- add NULLABLE or REPEATED columns, at the top level or inside a RECORD (``ADD_COLUMNS``);
- relax a REQUIRED column to NULLABLE (``ADD_AND_RELAX_COLUMNS``);
- nothing else: a new REQUIRED column, a changed type, or a column turned into or out of
  REPEATED are refused with a :class:`SchemaUpdateError` naming the table and the column.

Columns are matched by name case-insensitively, as BigQuery does. A table column the serializer
no longer names is left alone (its rows get NULL, or the column's default value).

Many subtasks meeting the same table race to update it. Each update is a ``tables.patch``
guarded by the etag of the table it was computed from; a subtask that lost the race gets 412,
reads the table again and finds nothing left to do, so a table gets one effective update.
"""

from __future__ import annotations

import copy
import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.rows import UnknownColumnError, bq_type
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.errors import ConfigurationError

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: Concurrent updates of one table a subtask re-reads and re-plans before it gives up.
MAX_UPDATE_ATTEMPTS = 10


class SchemaUpdate(enum.Enum):
    """What the sink may change in an existing table's schema so the serializer's rows fit.

    ``NONE`` (the default): nothing; a row with a column the table lacks is refused.
    ``ADD_COLUMNS``: add the NULLABLE and REPEATED columns (nested ones included) the
    serializer's schema has and the table lacks. ``ADD_AND_RELAX_COLUMNS``: also turn REQUIRED
    columns the serializer's schema has as NULLABLE into NULLABLE. These are what BigQuery's
    ``ALLOW_FIELD_ADDITION`` and ``ALLOW_FIELD_RELAXATION`` allow.
    """

    NONE = "NONE"
    ADD_COLUMNS = "ADD_COLUMNS"
    ADD_AND_RELAX_COLUMNS = "ADD_AND_RELAX_COLUMNS"

    @property
    def load_options(self) -> list[str]:
        """The load job's ``schemaUpdateOptions`` for this mode."""
        if self is SchemaUpdate.ADD_COLUMNS:
            return ["ALLOW_FIELD_ADDITION"]
        if self is SchemaUpdate.ADD_AND_RELAX_COLUMNS:
            return ["ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"]
        return []


class UnknownFields(enum.Enum):
    """What becomes of a row (a dict) with a key that is no column of its table.

    ``FAIL`` (the default): the job fails with an error naming the table, the key and the
    record, whatever the failure handler: such a key usually means a serializer and a table
    that do not match, which a dead-letter queue would hide while it fills up with every row.
    ``IGNORE``: the key is dropped and the rest of the row written. ``FAILURE_HANDLER``: the
    row is a failed record, handed to the sink's failure handler (dropped, dead-lettered, or
    failing the job) like a row with a wrong value.
    """

    FAIL = "FAIL"
    IGNORE = "IGNORE"
    FAILURE_HANDLER = "FAILURE_HANDLER"


class MissingValues(enum.Enum):
    """What a column gets when a row has no value for it (the Storage Write API's
    ``default_missing_value_interpretation``).

    ``NULL`` (the default): NULL (a REQUIRED column refuses the row). ``DEFAULT_VALUE``: the
    column's default value expression where it has one, else NULL. A key present with the
    value None is missing too.
    """

    NULL = "NULL"
    DEFAULT_VALUE = "DEFAULT_VALUE"


#: Why a row with an unknown key ended the job, after the sink's message.
UNKNOWN_FIELDS_HINT = (
    "BigQueryWriterOptions.unknown_fields is UnknownFields.FAIL (the default): add the column "
    "to the serializer's schema with schema_update(SchemaUpdate.ADD_COLUMNS), drop such keys "
    "with unknown_fields(UnknownFields.IGNORE), or hand such rows to the failure handler with "
    "unknown_fields(UnknownFields.FAILURE_HANDLER)"
)


def fatal_reason(error: RowError, policy: UnknownFields) -> str:
    """Why a row that cannot be encoded ends the job whatever the failure handler (for
    :attr:`FailedRecord.fatal <pyflink_gcp.core.failure.FailedRecord.fatal>`): a key that is no
    column under ``UnknownFields.FAIL``; '' for a record failure like any other."""
    if isinstance(error, UnknownColumnError) and policy is UnknownFields.FAIL:
        return UNKNOWN_FIELDS_HINT
    return ""


class SchemaUpdateError(ConfigurationError):
    """A schema change BigQuery cannot make (a type change, a new REQUIRED column)."""


def _mode(field: SchemaField) -> str:
    return (field.mode or "NULLABLE").upper()


def _with(field: SchemaField, **changes: Any) -> SchemaField:
    """``field`` with some of its API properties replaced (SchemaField is immutable)."""
    api = copy.deepcopy(field.to_api_repr())  # the field's own properties, not a copy
    api.update(changes)
    return SchemaField.from_api_repr(api)


def merged_schema(
    table: Sequence[SchemaField],
    wanted: Sequence[SchemaField],
    mode: SchemaUpdate,
    where: str,
) -> tuple[list[SchemaField], list[str]] | None:
    """The table's schema with what ``wanted`` adds to it, and a line per change; None when
    ``mode`` changes nothing (or is ``NONE``).

    The table's columns keep their order; new columns follow, in the serializer's order.

    Args:
        table: The table's columns.
        wanted: The columns the serializer's schema gives the table.
        mode: What may change.
        where: The table, for messages (``"sink 's': table p.d.t"``).

    Raises:
        SchemaUpdateError: A change BigQuery cannot make, naming the table and the column.
    """
    if mode is SchemaUpdate.NONE:
        return None
    changes: list[str] = []
    merged = _merge(list(table), list(wanted), mode, where, "", changes)
    return (merged, changes) if changes else None


def _merge(
    table: list[SchemaField],
    wanted: list[SchemaField],
    mode: SchemaUpdate,
    where: str,
    prefix: str,
    changes: list[str],
) -> list[SchemaField]:
    by_name = {f.name.lower(): f for f in wanted}
    out: list[SchemaField] = []
    for column in table:
        want = by_name.pop(column.name.lower(), None)
        if want is None:
            out.append(column)
            continue
        path = prefix + column.name
        have_type, want_type = bq_type(column), bq_type(want)
        if have_type != want_type:
            raise SchemaUpdateError(
                f"{where}: column {path} is {have_type} in the table and {want_type} in the "
                "serializer's schema; BigQuery cannot change a column's type in place (add a "
                "column of another name, or write to a new table)"
            )
        have_mode, want_mode = _mode(column), _mode(want)
        if (have_mode == "REPEATED") != (want_mode == "REPEATED"):
            raise SchemaUpdateError(
                f"{where}: column {path} is {have_mode} in the table and {want_mode} in the "
                "serializer's schema; BigQuery cannot make a column REPEATED or stop it being so"
            )
        updated = column
        relax = have_mode == "REQUIRED" and want_mode == "NULLABLE"
        if relax and mode is SchemaUpdate.ADD_AND_RELAX_COLUMNS:
            updated = _with(updated, mode="NULLABLE")
            changes.append(f"relaxed {path} to NULLABLE")
        if have_type == "RECORD":
            fields = _merge(
                list(column.fields), list(want.fields), mode, where, path + ".", changes
            )
            if [f.to_api_repr() for f in fields] != [f.to_api_repr() for f in column.fields]:
                updated = _with(updated, fields=[copy.deepcopy(f.to_api_repr()) for f in fields])
        out.append(updated)
    for new in by_name.values():
        path = prefix + new.name
        if _mode(new) == "REQUIRED":
            raise SchemaUpdateError(
                f"{where}: the serializer's schema adds column {path} as REQUIRED; BigQuery "
                "adds only NULLABLE or REPEATED columns to an existing table (make it NULLABLE)"
            )
        out.append(new)
        changes.append(f"added {path} {bq_type(new)} {_mode(new)}")
    return out


def update_schema(
    get: Callable[[], Any],
    patch: Callable[[Any], Any],
    table: Any,
    wanted: Sequence[SchemaField],
    mode: SchemaUpdate,
    where: str,
) -> tuple[Any, list[str]]:
    """Bring ``table``'s schema up to ``wanted``; the table as it is now and the changes this
    call made (empty when there was nothing to do, or another writer did it first).

    Args:
        get: Reads the table again (after a 412: someone else changed it meanwhile).
        patch: ``tables.patch`` of the schema, guarded by the table's etag; answers 412
            (``PreconditionFailed``) when the table changed since it was read.
        table: The table as last read (a ``google.cloud.bigquery.Table``).
        wanted: The serializer's columns for the table.
        mode: What may change.
        where: The table, for messages.

    Raises:
        SchemaUpdateError: A change BigQuery cannot make, or a table that kept changing under
            :data:`MAX_UPDATE_ATTEMPTS` attempts.
    """
    for _ in range(MAX_UPDATE_ATTEMPTS):
        plan = merged_schema(table.schema, wanted, mode, where)
        if plan is None:
            return table, []
        fields, changes = plan
        table.schema = fields
        try:
            return patch(table), changes
        except gexc.PreconditionFailed:
            # Changed since read (another subtask's update, most likely): read it and plan again.
            table = get()
    raise SchemaUpdateError(
        f"{where}: the table's schema changed under {MAX_UPDATE_ATTEMPTS} updates in a row; "
        "something else keeps updating it"
    )
