"""The table a BigQuery sink creates: its columns and the rest of its spec (primary key,
clustering, partitioning, labels, description, KMS key), checked when the value is built with
BigQuery's own rules, so a mistake fails at ``build()`` rather than at a table's creation."""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.cloud.bigquery import (
    EncryptionConfiguration,
    PartitionRange,
    RangePartitioning,
    SchemaField,
    Table,
    TimePartitioning,
)
from google.cloud.bigquery.table import PrimaryKey, TableConstraints

from pyflink_gcp.core.errors import ConfigurationError


def _as_field(spec: Any) -> SchemaField:
    if isinstance(spec, SchemaField):
        return spec
    if isinstance(spec, tuple | list) and 2 <= len(spec) <= 3:
        name, field_type, *mode = spec
        return SchemaField(str(name), str(field_type), mode=mode[0] if mode else "NULLABLE")
    raise ConfigurationError(
        "a table schema field is a google.cloud.bigquery.SchemaField or a (name, type[, mode]) "
        f"tuple, got {spec!r}"
    )


class TableSchemaError(ConfigurationError):
    """A :class:`TableSchema` setting BigQuery would refuse, raised when the schema is built
    rather than when the sink creates its first table, hours into the job.

    Attributes:
        setting: The argument at fault (``time_partitioning``, ``labels``...), for callers that
            expose it under another name (the SQL connector names its option keys).
    """

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


#: BigQuery's time-unit partitionings, and the column types it partitions by time.
TIME_PARTITIONING_TYPES = ("DAY", "HOUR", "MONTH", "YEAR")
_TIME_COLUMNS = ("TIMESTAMP", "DATE", "DATETIME")
#: The column types BigQuery clusters on (top-level, not REPEATED), and how many at most.
CLUSTERING_TYPES: tuple[str, ...] = ("BIGNUMERIC", "BOOL", "DATE", "DATETIME", "GEOGRAPHY")
CLUSTERING_TYPES += ("INT64", "NUMERIC", "RANGE", "STRING", "TIMESTAMP")
MAX_CLUSTERING_FIELDS = 4
#: Labels per table, at most; keys and values have at most 63 characters.
MAX_LABELS = 64
_KMS_KEY = re.compile(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+")
#: The legacy type names a SchemaField may carry, as standard SQL names them.
_ALIASES = {"INTEGER": "INT64", "BOOLEAN": "BOOL", "FLOAT": "FLOAT64", "STRUCT": "RECORD"}


def _names(value: Any, setting: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TableSchemaError(f"{setting} is a sequence of column names, got {value!r}", setting)
    return tuple(value)


def _label_text(text: str, key: bool) -> bool:
    """BigQuery's rule for a label key (``key``) or value: at most 63 lowercase letters (Unicode
    categories Ll and Lo, so international ones too), numbers, underscores and dashes; a key
    starts with a letter and is not empty."""
    letters = ("Ll", "Lo")
    kinds = ["_" if c in "_-" else unicodedata.category(c) for c in text]
    if len(text) > 63 or (key and (not kinds or kinds[0] not in letters)):
        return False
    return all(k == "_" or k in letters or k.startswith("N") for k in kinds)


def _check_labels(labels: Any) -> tuple[tuple[str, str], ...]:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping) or len(labels) > MAX_LABELS:
        raise TableSchemaError(
            f"labels is a mapping of at most {MAX_LABELS} str keys to str values, got "
            f"{type(labels).__name__} {labels!r}",
            "labels",
        )
    for key, value in labels.items():
        if not (isinstance(key, str) and _label_text(key, key=True)):
            raise TableSchemaError(
                f"labels: key {key!r} is no label key (1-63 lowercase letters, digits, _ or -, "
                "starting with a letter)",
                "labels",
            )
        if not (isinstance(value, str) and _label_text(value, key=False)):
            raise TableSchemaError(
                f"labels: value {value!r} of key {key!r} is no label value (0-63 lowercase "
                "letters, digits, _ or -)",
                "labels",
            )
    return tuple(sorted(labels.items()))


def _copy_range(partitioning: RangePartitioning) -> RangePartitioning:
    bounds = partitioning.range_
    return RangePartitioning(
        PartitionRange(start=bounds.start, end=bounds.end, interval=bounds.interval),
        field=partitioning.field,
    )


class TableSchema:
    """The schema of a table the sink creates (``CreateDisposition.CREATE_IF_NEEDED``), and the
    rest of its spec: primary key, clustering, partitioning, labels, description, KMS key.

    Also tells the sink the table's primary key when the table's own metadata does not (for
    change data capture the key decides how requests are cut; see :class:`BigQuerySerializer`).
    Every setting is checked against BigQuery's rules here, so a mistake fails the job when it
    starts, not at the first table it creates hours later. Immutable: the partitionings are
    copied in and handed out as copies, so a schema shared by many tables (and pickled to the
    workers) cannot change under them. Equal when every setting is.

    A serializer may return a different one per table (see :class:`BigQuerySerializer`): a
    table per region, say, each partitioned by day on ``event_time``, its rows kept 90 days,
    clustered by user and labelled with its region::

        def region_schema(destination: TableDestination) -> TableSchema:
            return TableSchema.of(
                [("event_time", "TIMESTAMP", "REQUIRED"), ("user_id", "STRING")],
                time_partitioning=TimePartitioning(
                    type_="DAY", field="event_time", expiration_ms=90 * 86_400_000
                ),
                clustering_fields=["user_id"],
                labels={"region": destination.table.removeprefix("events_")},
            )

        BigQuerySerializer.of(schema=region_schema)
    """

    __slots__ = (
        "fields",
        "primary_key",
        "clustering_fields",
        "_time",
        "_range",
        "require_partition_filter",
        "_labels",
        "description",
        "kms_key_name",
    )

    def __init__(
        self,
        fields: Sequence[SchemaField],
        primary_key: Sequence[str] = (),
        clustering_fields: Sequence[str] = (),
        *,
        time_partitioning: TimePartitioning | None = None,
        range_partitioning: RangePartitioning | None = None,
        require_partition_filter: bool | None = None,
        labels: Mapping[str, str] | None = None,
        description: str | None = None,
        kms_key_name: str | None = None,
    ) -> None:
        """See :meth:`of`.

        Raises:
            ConfigurationError: A field is no SchemaField or tuple, or a setting is of the
                wrong type or breaks one of BigQuery's rules (a :class:`TableSchemaError`
                naming the setting and the value).
        """
        self.fields: tuple[SchemaField, ...] = tuple(_as_field(f) for f in fields)
        if not self.fields:
            raise ConfigurationError("a table schema needs at least one field")
        self.primary_key: tuple[str, ...] = _names(primary_key, "primary_key")
        for column in self.primary_key:
            self._column(column, "primary_key", ())
        self.clustering_fields: tuple[str, ...] = _names(clustering_fields, "clustering_fields")
        if len(self.clustering_fields) > MAX_CLUSTERING_FIELDS:
            raise TableSchemaError(
                f"clustering_fields: BigQuery clusters on at most {MAX_CLUSTERING_FIELDS} "
                f"columns, got {list(self.clustering_fields)}",
                "clustering_fields",
            )
        for column in self.clustering_fields:
            self._column(column, "clustering_fields", CLUSTERING_TYPES)
        self._time = self._check_time(time_partitioning)
        self._range = self._check_range(range_partitioning)
        if self._time is not None and self._range is not None:
            raise TableSchemaError(
                "time_partitioning and range_partitioning are both set, a table has one "
                f"partitioning: got {time_partitioning!r} and {range_partitioning!r}",
                "range_partitioning",
            )
        if not isinstance(require_partition_filter, bool | None):
            raise TableSchemaError(
                f"require_partition_filter is a bool, got {require_partition_filter!r}",
                "require_partition_filter",
            )
        if require_partition_filter and self._time is None and self._range is None:
            raise TableSchemaError(
                "require_partition_filter=True needs time_partitioning or range_partitioning (a "
                "table without partitions has none to filter on)",
                "require_partition_filter",
            )
        self.require_partition_filter = require_partition_filter
        self._labels = _check_labels(labels)
        if not isinstance(description, str | None):
            raise TableSchemaError(f"description is a str, got {description!r}", "description")
        self.description = description
        if kms_key_name is not None and not (
            isinstance(kms_key_name, str) and _KMS_KEY.fullmatch(kms_key_name)
        ):
            raise TableSchemaError(
                "kms_key_name is a Cloud KMS key, projects/<project>/locations/<location>/"
                f"keyRings/<ring>/cryptoKeys/<key>, got {kms_key_name!r}",
                "kms_key_name",
            )
        self.kms_key_name = kms_key_name

    @staticmethod
    def of(
        fields: Iterable[Any],
        primary_key: Sequence[str] | None = None,
        clustering_fields: Sequence[str] | None = None,
        *,
        time_partitioning: TimePartitioning | None = None,
        range_partitioning: RangePartitioning | None = None,
        require_partition_filter: bool | None = None,
        labels: Mapping[str, str] | None = None,
        description: str | None = None,
        kms_key_name: str | None = None,
    ) -> TableSchema:
        """A schema of ``fields`` (SchemaFields, nested RECORD fields included, or
        ``(name, type[, mode])`` tuples) and the settings of the tables created with it.

        Args:
            fields: The columns.
            primary_key: The primary key's columns.
            clustering_fields: Up to four top-level columns to cluster on, in order.
            time_partitioning: ``TimePartitioning(type_=..., field=..., expiration_ms=...)``,
                on a TIMESTAMP, DATE or DATETIME column (no ``field``: by ingestion time).
            range_partitioning: ``RangePartitioning(PartitionRange(start, end, interval),
                field=...)`` on an INT64 column (not with ``time_partitioning``).
            require_partition_filter: Whether queries must filter on the partitions.
            labels: The table's labels, as BigQuery's rules for labels allow.
            description: The table's description.
            kms_key_name: The Cloud KMS key that encrypts the table.

        Raises:
            ConfigurationError: A setting BigQuery would refuse (a :class:`TableSchemaError`).
        """
        return TableSchema(
            list(fields),
            _names(primary_key, "primary_key"),
            _names(clustering_fields, "clustering_fields"),
            time_partitioning=time_partitioning,
            range_partitioning=range_partitioning,
            require_partition_filter=require_partition_filter,
            labels=labels,
            description=description,
            kms_key_name=kms_key_name,
        )

    @property
    def time_partitioning(self) -> TimePartitioning | None:
        """The time-unit partitioning (a copy), or None."""
        if self._time is None:
            return None
        return TimePartitioning.from_api_repr(copy.deepcopy(self._time.to_api_repr()))

    @property
    def range_partitioning(self) -> RangePartitioning | None:
        """The integer-range partitioning (a copy), or None."""
        return None if self._range is None else _copy_range(self._range)

    @property
    def labels(self) -> dict[str, str]:
        """The labels (a new dict, empty when none)."""
        return dict(self._labels)

    def apply_to(self, table: Table) -> None:
        """Set every setting on ``table``, a ``google.cloud.bigquery.Table`` about to be
        created (the one place that maps them onto the table resource)."""
        table.schema = list(self.fields)
        if self.primary_key:
            table.table_constraints = TableConstraints(
                primary_key=PrimaryKey(columns=list(self.primary_key)), foreign_keys=[]
            )
        if self.clustering_fields:
            table.clustering_fields = list(self.clustering_fields)
        if self._time is not None:
            table.time_partitioning = self.time_partitioning
        if self._range is not None:
            table.range_partitioning = self.range_partitioning
        if self.require_partition_filter is not None:
            table.require_partition_filter = self.require_partition_filter
        if self._labels:
            table.labels = self.labels
        if self.description is not None:
            table.description = self.description
        if self.kms_key_name is not None:
            table.encryption_configuration = EncryptionConfiguration(kms_key_name=self.kms_key_name)

    def _column(self, name: str, setting: str, types: tuple[str, ...]) -> str:
        """The type of top-level column ``name`` (BigQuery's names are case-insensitive),
        checked to be a non-repeated one of ``types`` if they are given."""
        field = next((f for f in self.fields if f.name.lower() == name.lower()), None)
        if field is None:
            columns = ", ".join(f.name for f in self.fields)
            raise TableSchemaError(
                f"{setting}: {name!r} is not a field of the table schema (its top-level columns: "
                f"{columns})",
                setting,
            )
        kind = str(field.field_type or "").upper()
        kind = _ALIASES.get(kind, kind)
        mode = (field.mode or "NULLABLE").upper()
        if types and (mode == "REPEATED" or kind not in types):
            raise TableSchemaError(
                f"{setting}: column {name!r} is {mode} {kind}; it must be a non-repeated "
                f"{', '.join(types)} column",
                setting,
            )
        return kind

    def _check_time(self, partitioning: Any) -> TimePartitioning | None:
        if partitioning is None:
            return None
        if not isinstance(partitioning, TimePartitioning):
            raise TableSchemaError(
                "time_partitioning is a google.cloud.bigquery.TimePartitioning, got "
                f"{type(partitioning).__name__} {partitioning!r}",
                "time_partitioning",
            )
        spec = copy.deepcopy(partitioning.to_api_repr())
        unit, expiration = spec.get("type"), spec.get("expirationMs")
        problem = None
        if unit not in TIME_PARTITIONING_TYPES:
            problem = f"type {unit!r} is not one of {', '.join(TIME_PARTITIONING_TYPES)}"
        elif expiration is not None and not (str(expiration).isdigit() and int(expiration) > 0):
            problem = f"expiration_ms {expiration!r} is no positive number of milliseconds"
        elif "requirePartitionFilter" in spec:
            problem = "sets require_partition_filter, which BigQuery deprecated there: pass it "
            problem += "to the TableSchema instead"
        elif spec.get("field") is not None:
            kind = self._column(spec["field"], "time_partitioning", _TIME_COLUMNS)
            if unit == "HOUR" and kind == "DATE":
                problem = f"type HOUR cannot partition DATE column {spec['field']!r} (DAY, MONTH "
                problem += "or YEAR can)"
        if problem is not None:
            raise TableSchemaError(f"time_partitioning {problem}", "time_partitioning")
        return TimePartitioning.from_api_repr(spec)

    def _check_range(self, partitioning: Any) -> RangePartitioning | None:
        if partitioning is None:
            return None
        if not isinstance(partitioning, RangePartitioning):
            raise TableSchemaError(
                "range_partitioning is a google.cloud.bigquery.RangePartitioning, got "
                f"{type(partitioning).__name__} {partitioning!r}",
                "range_partitioning",
            )
        try:
            bounds = partitioning.range_
            start, end, interval = bounds.start, bounds.end, bounds.interval
        except (TypeError, ValueError):  # a bound that is no integer
            start = end = interval = None
        if not isinstance(partitioning.field, str) or None in (start, end, interval):
            raise TableSchemaError(
                "range_partitioning needs a field and a PartitionRange(start, end, interval) of "
                f"integers, got {partitioning!r}",
                "range_partitioning",
            )
        if not start < end or interval <= 0:
            raise TableSchemaError(
                f"range_partitioning start={start}, end={end}, interval={interval}: the start "
                "must be below the end and the interval positive",
                "range_partitioning",
            )
        copied = _copy_range(partitioning)
        self._column(copied.field, "range_partitioning", ("INT64",))
        return copied

    def _key(self) -> tuple[Any, ...]:
        """Every setting, hashable: the time partitioning as the JSON of its REST form, the
        range one as its values (the client library's RangePartitioning has no hash)."""
        time = None if self._time is None else json.dumps(self._time.to_api_repr(), sort_keys=True)
        ranged: tuple[Any, ...] | None = None
        if self._range is not None:
            bounds = self._range.range_
            ranged = (self._range.field, bounds.start, bounds.end, bounds.interval)
        return (
            self.fields,
            self.primary_key,
            self.clustering_fields,
            time,
            ranged,
            self.require_partition_filter,
            self._labels,
            self.description,
            self.kms_key_name,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableSchema):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name} {f.field_type}" for f in self.fields)
        settings = {
            "primary_key": list(self.primary_key) or None,
            "clustering_fields": list(self.clustering_fields) or None,
            "time_partitioning": self._time,
            "range_partitioning": self._range,
            "require_partition_filter": self.require_partition_filter,
            "labels": self.labels or None,
            "description": self.description,
            "kms_key_name": self.kms_key_name,
        }
        shown = "".join(f", {k}={v!r}" for k, v in settings.items() if v is not None)
        return f"TableSchema([{cols}]{shown})"


def as_table_schema(schema: Any) -> TableSchema | None:
    """``schema`` as a :class:`TableSchema`: one already, a list of
    ``google.cloud.bigquery.SchemaField`` (the client library's own idiom; ``(name, type[,
    mode])`` tuples too), or None.

    Raises:
        ConfigurationError: ``schema`` is none of these.
    """
    if schema is None or isinstance(schema, TableSchema):
        return schema
    if isinstance(schema, list | tuple):
        return TableSchema(schema)
    raise ConfigurationError(
        "a table schema is a TableSchema or a list of google.cloud.bigquery.SchemaField, "
        f"got {type(schema).__name__}"
    )
