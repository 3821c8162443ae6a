"""The Bigtable destination value: a table, named ``projects/{p}/instances/{i}/tables/{t}``, and
Bigtable's table id rule."""

from __future__ import annotations

import re

from pyflink_gcp.core.lineage import LineageDataset, resource_dataset
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination

#: A Bigtable table id: what :class:`TableDestination` accepts and templates render
#: (``pyflink_gcp.routing.names.bigtable_table_id``).
#:
#: ``[_a-zA-Z0-9][-_.a-zA-Z0-9]*`` (the Admin API's ``Table.name`` pattern,
#: https://cloud.google.com/bigtable/docs/reference/admin/rest/v2/projects.instances.tables),
#: at most 50 characters (``CreateTableRequest.tableId``: "Maximum 50 characters").
#: ``sanitize`` replaces with ``_``; a name may not start with ``-`` or ``.``.
TABLE_ID = NameRule(
    "Bigtable table id",
    allowed="-_.",
    replacement="_",
    min_length=1,
    max_length=50,
    first="_",
    first_digit=True,
)

# Bigtable's instance and project id rules, checked here so a resolver bug fails on the record
# that caused it (the resolver's error names the record) rather than later as an RPC error
# naming nothing.
_INSTANCE_ID = re.compile(r"[a-z][-a-z0-9]{0,32}")
_PROJECT_ID = re.compile(r"[-a-z0-9.:]{1,100}")


class TableDestination(Destination):
    """A Bigtable table: what a Bigtable sink's destination resolver returns.

    Immutable; equality, hash and ``str()`` are the resource name, so two values built
    separately for the same table reach the same batcher.

    Example:
        ``TableDestination.of("my-project", "my-instance", "events_20260101")``
    """

    __slots__ = ()
    _ids = ("project", "instance", "table")

    def __init__(self, project: str, instance: str, table: str) -> None:
        for what, value, pattern in (
            ("project", project, _PROJECT_ID),
            ("instance", instance, _INSTANCE_ID),
        ):
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ValueError(
                    f"invalid Bigtable {what} id {value!r} in TableDestination.of"
                    f"({project!r}, {instance!r}, {table!r})"
                )
        reason = TABLE_ID.validate(table) if isinstance(table, str) else "is not a string"
        if reason is not None:
            raise ValueError(
                f"invalid Bigtable table id {table!r} in TableDestination.of"
                f"({project!r}, {instance!r}, {table!r}): it {reason}"
            )
        self._init_name(f"projects/{project}/instances/{instance}/tables/{table}")

    @staticmethod
    def of(*ids: str) -> TableDestination:
        """``of(project, instance, table)``: the table ``table`` of Bigtable instance
        ``instance`` in ``project``; ``of(instance, table)`` is in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name. Equal
        arguments return the same (immutable) value from a bounded cache.

        Raises:
            ValueError: An id that Bigtable would reject, or no project given and the variable
                unset.
        """
        return TableDestination._of(ids)

    def lineage_dataset(self) -> LineageDataset:
        """The table's dataset: namespace ``bigtable``, name ``project.instance.table``
        (OpenLineage names no Bigtable datasets; this follows its BigQuery form)."""
        name = f"{self.project}.{self.instance}.{self.table}"
        return resource_dataset("bigtable", name, "bigtable", self._name)

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def instance(self) -> str:
        return self._name.split("/")[3]

    @property
    def table(self) -> str:
        """The table id (the last part of the resource name)."""
        return self._name.split("/")[5]

    @property
    def instance_name(self) -> str:
        """``projects/{p}/instances/{i}``: the parent of the table in admin calls."""
        return self._name.rsplit("/tables/", 1)[0]
