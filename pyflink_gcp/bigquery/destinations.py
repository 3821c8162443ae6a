"""BigQuery destinations: a table, identified by its resource name, and BigQuery's table id rule."""

from __future__ import annotations

import re

from pyflink_gcp.core.lineage import LineageDataset, resource_dataset
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination

#: A BigQuery table id: what :class:`TableDestination` accepts (before a partition decorator)
#: and templates render (``pyflink_gcp.routing.names.bigquery_table_id``).
#:
#: BigQuery allows Unicode letters, marks and numbers, connectors (``_``), dashes and spaces
#: (general categories L, M, N, Pc, Pd, Zs), up to 1,024 UTF-8 bytes, with no rule for the first
#: character (https://cloud.google.com/bigquery/docs/tables#table_naming; the REST reference's
#: TableReference says 1,024 *characters*, so the stricter byte count is checked): ``orders
#: 2024``, ``étudiant-01`` and ``00_お客様`` are valid. ``sanitize`` is conservative: values keep
#: only ``[A-Za-z0-9_-]``, so a name built from record values is also a plain identifier for
#: the bq tool, legacy SQL and the SQL connectors; spaces and non-ASCII letters become ``_``.
#: Table names are case-sensitive by default, so case is kept.
TABLE_ID = NameRule(
    "BigQuery table id",
    allowed="_-",
    replacement="_",
    min_length=1,
    max_length=1024,
    unicode_categories=("L", "M", "N", "Pc", "Pd", "Zs"),
    max_bytes=1024,
    characters="letters, marks, numbers, connectors such as '_', dashes and spaces",
)

# Dataset ids: letters, digits and underscores, up to 1,024 characters.
_DATASET_ID = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
# Partition ids of a decorator (``t$20240101``): yyyy, yyyymm, yyyymmdd or yyyymmddhh of a
# time-unit partitioning, the start of an integer range (possibly negative), or one of the
# special partitions (https://cloud.google.com/bigquery/docs/managing-partitioned-table-data).
_PARTITION_ID = re.compile(r"^(-?[0-9]{1,19}|__UNPARTITIONED__|__NULL__)$")


class TableDestination(Destination):
    """A BigQuery table: ``projects/{project}/datasets/{dataset}/tables/{table}``.

    ``table`` may name one partition with a decorator (``orders$20261202``): a partitioned
    table's partition, which ``WriteMethod.FILE_LOADS`` loads into (the Storage Write API
    methods refuse it, see docs/bigquery.md). The table itself is :attr:`base`.

    Validated when built, so that a resolver producing an impossible name fails on the record
    that produced it, with the name in the message, instead of as an opaque error at flush time.
    """

    __slots__ = ()
    _ids = ("project", "dataset", "table")

    def __init__(self, project: str, dataset: str, table: str) -> None:
        if not project or not isinstance(project, str) or "/" in project:
            raise ValueError(f"invalid BigQuery project id {project!r}")
        if not isinstance(dataset, str) or not _DATASET_ID.match(dataset):
            raise ValueError(
                f"invalid BigQuery dataset id {dataset!r}: 1-1024 letters, digits or underscores"
            )
        if not isinstance(table, str):
            raise ValueError(f"invalid BigQuery table id {table!r}: not a string")
        base, dollar, partition = table.partition("$")
        reason = TABLE_ID.validate(base)
        if reason is not None:
            raise ValueError(
                f"invalid BigQuery table id {table!r}: {base!r} {reason} (a partition "
                "decorator such as $20240101 may follow)"
            )
        if dollar and not _PARTITION_ID.match(partition):
            raise ValueError(
                f"invalid partition decorator in BigQuery table id {table!r}: after '$' comes "
                "a partition id (yyyy, yyyymm, yyyymmdd, yyyymmddhh, an integer range start, "
                "__UNPARTITIONED__ or __NULL__)"
            )
        self._init_name(f"projects/{project}/datasets/{dataset}/tables/{table}")

    @staticmethod
    def of(*ids: str) -> TableDestination:
        """``of(project, dataset, table)``; ``of(dataset, table)`` is in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name. Equal
        arguments return the same (immutable) value from a bounded cache.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
        """
        return TableDestination._of(ids)

    @staticmethod
    def from_table_id(table_id: str) -> TableDestination:
        """Parse ``project.dataset.table`` or ``dataset.table`` (the forms BigQuery's SQL uses;
        the short one is in ``GOOGLE_CLOUD_PROJECT``)."""
        parts = table_id.split(".")
        if len(parts) not in (2, 3):
            raise ValueError(f"not a table id of the form [project.]dataset.table: {table_id!r}")
        return TableDestination.of(*parts)

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def dataset(self) -> str:
        return self._name.split("/")[3]

    @property
    def table(self) -> str:
        return self._name.split("/")[5]

    @property
    def partition(self) -> str | None:
        """The partition id of a decorated table (``t$20240101`` → ``"20240101"``), else None."""
        _, dollar, partition = self.table.partition("$")
        return partition if dollar else None

    @property
    def base(self) -> TableDestination:
        """The table itself, without its partition decorator (``self`` if it has none): where
        the sink looks the table up, creates it and updates its schema."""
        if self.partition is None:
            return self
        return TableDestination(self.project, self.dataset, self.table.partition("$")[0])

    @property
    def table_id(self) -> str:
        """``project.dataset.table``, as the REST client and SQL take it."""
        _, project, _, dataset, _, table = self._name.split("/")
        return f"{project}.{dataset}.{table}"

    def lineage_dataset(self) -> LineageDataset:
        """OpenLineage's BigQuery dataset: namespace ``bigquery``, name
        ``project.dataset.table`` of the table itself (every partition of a table is one
        dataset)."""
        base = self.base
        return resource_dataset("bigquery", base.table_id, "bigquery", base.resource_name)

    @property
    def default_stream(self) -> str:
        """The Storage Write API default stream of the table."""
        return f"{self._name}/streams/_default"
