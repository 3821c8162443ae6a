"""The Spanner destination value: a database, ``projects/{p}/instances/{i}/databases/{d}``, and
Spanner's table name rule."""

from __future__ import annotations

import re

from pyflink_gcp.core.lineage import LineageDataset, resource_dataset
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination

#: A Spanner (GoogleSQL dialect) table name: what templates render for a Spanner table
#: (``pyflink_gcp.routing.names.spanner_table_name``, the ``gcp-spanner`` SQL connector's
#: ``table``).
#:
#: ``{a—z|A—Z}[{a—z|A—Z|0—9|_}+]`` in the DDL grammar
#: (https://cloud.google.com/spanner/docs/reference/standard-sql/data-definition-language) and 1
#: to 128 characters (https://cloud.google.com/spanner/quotas, "Table name length"). Spanner
#: compares names without regard to case (``Orders`` and ``orders`` are one table), while the
#: sink keeps one destination per distinct string, so keep the case of a template's values
#: consistent. A :class:`~pyflink_gcp.spanner.Mutation` is not checked by it: its table may be
#: ``schema.table`` in a named schema, and the schema read when a subtask opens is the
#: authority on which tables exist. PostgreSQL-dialect databases allow only 63 characters;
#: build a :class:`~pyflink_gcp.core.names.NameRule` with ``max_length=63`` for them.
TABLE_NAME = NameRule(
    "Spanner table name",
    allowed="_",
    replacement="_",
    min_length=1,
    max_length=128,
    first="",
)

# Spanner's own id rules, checked at build() so that a typo fails before the job starts rather
# than as a NOT_FOUND on the workers.
_PROJECT_ID = re.compile(r"[-a-z0-9.:]{1,100}")
_INSTANCE_ID = re.compile(r"[a-z][-a-z0-9]{0,62}[a-z0-9]")
_DATABASE_ID = re.compile(r"[a-z][a-z0-9_\-]{0,28}[a-z0-9]")


class DatabaseDestination(Destination):
    """A Spanner database: the one destination of a Spanner sink.

    Spanner sinks have no resolver: every record goes to this database, and the table is named
    by the :class:`~pyflink_gcp.spanner.Mutation` the serializer returns. Immutable; equality,
    hash and ``str()`` are the resource name.

    Example:
        ``DatabaseDestination.of("my-project", "my-instance", "my-database")``
    """

    __slots__ = ()
    _ids = ("project", "instance", "database")

    def __init__(self, project: str, instance: str, database: str) -> None:
        for what, value, pattern, rule in (
            ("project", project, _PROJECT_ID, "1-100 characters of [-a-z0-9.:]"),
            ("instance", instance, _INSTANCE_ID, "2-64 characters of [-a-z0-9], from a letter"),
            ("database", database, _DATABASE_ID, "2-30 characters of [a-z0-9_-], from a letter"),
        ):
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ValueError(
                    f"invalid Spanner {what} id {value!r} in DatabaseDestination.of"
                    f"({project!r}, {instance!r}, {database!r}): {what} ids are {rule}"
                )
        self._init_name(f"projects/{project}/instances/{instance}/databases/{database}")

    @staticmethod
    def of(*ids: str) -> DatabaseDestination:
        """``of(project, instance, database)``: the database ``database`` of Spanner instance
        ``instance`` in ``project``; ``of(instance, database)`` is in ``GOOGLE_CLOUD_PROJECT``.

        A Spanner sink's database is built with the job (``set_database``), so the variable is
        read in the process that builds the job, and becomes part of the resource name.

        Raises:
            ValueError: An id that Spanner would reject, or no project given and the variable
                unset.
        """
        return DatabaseDestination._of(ids)

    def lineage_dataset(self) -> LineageDataset:
        """The database's dataset: namespace ``spanner``, name ``project.instance.database``
        (OpenLineage names no Spanner datasets; this follows its BigQuery form). The tables
        are named by each mutation, so a Spanner sink reports its database."""
        name = f"{self.project}.{self.instance}.{self.database}"
        return resource_dataset("spanner", name, "spanner", self._name)

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def instance(self) -> str:
        return self._name.split("/")[3]

    @property
    def database(self) -> str:
        """The database id (the last part of the resource name)."""
        return self._name.split("/")[5]
