"""The Spanner destination value: a database, ``projects/{p}/instances/{i}/databases/{d}``."""

from __future__ import annotations

import re

from pyflink_gcp.core.types import Destination, with_project

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
        project, instance, database = with_project(
            "DatabaseDestination", ids, ("project", "instance", "database")
        )
        return DatabaseDestination(project, instance, database)

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
