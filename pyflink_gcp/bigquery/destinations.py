"""BigQuery destinations: a table, identified by its resource name."""

from __future__ import annotations

import re

from pyflink_gcp.core.types import Destination, with_project

# Dataset ids: letters, digits and underscores, up to 1,024 characters.
_DATASET_ID = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
# Table ids: letters (any script), digits, underscores and dashes, up to 1,024 characters.
_TABLE_ID = re.compile(r"^[\w\-]{1,1024}$")
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

    def __init__(self, project: str, dataset: str, table: str) -> None:
        if not project or "/" in project:
            raise ValueError(f"invalid BigQuery project id {project!r}")
        if not _DATASET_ID.match(dataset or ""):
            raise ValueError(
                f"invalid BigQuery dataset id {dataset!r}: 1-1024 letters, digits or underscores"
            )
        base, dollar, partition = (table or "").partition("$")
        if not _TABLE_ID.match(base):
            raise ValueError(
                f"invalid BigQuery table id {table!r}: 1-1024 letters, digits, underscores or "
                "dashes, optionally with a partition decorator ($20240101)"
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
        and becomes part of the resource name, so equality stays the resource name.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
        """
        project, dataset, table = with_project(
            "TableDestination", ids, ("project", "dataset", "table")
        )
        return TableDestination(project, dataset, table)

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

    @property
    def default_stream(self) -> str:
        """The Storage Write API default stream of the table."""
        return f"{self._name}/streams/_default"
