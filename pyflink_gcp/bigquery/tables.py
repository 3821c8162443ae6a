"""Tables: looking one up (or creating it) over REST, and how its rows are encoded.

A table writer needs the table's schema before it can encode a row. The lookup is one
``tables.get`` (and, under ``CREATE_IF_NEEDED``, one ``tables.insert``) made by
:class:`TableCatalog` on a metadata thread, so a subtask meeting many new tables keeps
processing records meanwhile; the result is a :class:`TableLayout`.

A table's encoders (the protobuf message class and its descriptor pool, the Arrow schema, the
writer schemas its protobuf requests carry) cost about 19 KB of the worker's memory, most of it
in protobuf's C++ heap. Dynamic destinations usually mean many tables of one schema (a table
per tenant or per day), so the catalog builds them once per distinct schema and shares them
between those tables' layouts (:class:`EncoderCache`); a table of another schema, or one whose
schema changed when its writer is re-created, gets encoders of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.api_core import exceptions as gexc

from pyflink_gcp.bigquery.arrow_rows import ArrowEncoder
from pyflink_gcp.bigquery.client import ProtoSchema, resolve_rest_endpoint, rest_client
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.options import BigQueryWriterOptions, RowFormat
from pyflink_gcp.bigquery.rows import RowEncoder, SchemaNotSupportedError
from pyflink_gcp.bigquery.schema_update import (
    SchemaUpdate,
    SchemaUpdateError,
    UnknownFields,
    update_schema,
)
from pyflink_gcp.bigquery.serialization import TableSchema, as_table_schema, has_schema
from pyflink_gcp.core.creation import CreationBudget
from pyflink_gcp.core.errors import (
    ConfigurationError,
    DestinationNotFoundError,
    SerializerError,
    WriteError,
)
from pyflink_gcp.core.functions import describe_callable
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy, status_name

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: Timeout of one REST call (table metadata, creation), capped by the retry deadline.
_REST_TIMEOUT_S = 60.0

#: Distinct schemas whose encoders a catalog keeps for new writers (about 19 KB each). A job
#: writing more distinct schemas still works: a schema that fell out is built again.
SHARED_SCHEMAS = 256


class TableLayout:
    """How one table's rows are encoded: its protobuf encoder, its Arrow encoder if any, and
    its schema (``fields``, for the other encodings), and its location if known (shared
    AppendRows connections are routed by location).

    ``writer_schemas`` are the ``ProtoSchema`` messages a request of protobuf rows carries
    (plain rows, change-data-capture rows). Each is a copy of the encoder's descriptor in
    protobuf's heap, several KB, so they are built once per encoder and shared, like it, by
    every table of the schema (:meth:`with_location`).
    """

    __slots__ = (
        "encoder",
        "arrow",
        "fields",
        "location",
        "writer_schemas",
        "table_key_known",
        "assumed",
    )

    def __init__(
        self,
        encoder: RowEncoder,
        arrow: ArrowEncoder | None,
        fields: tuple[Any, ...] = (),
        writer_schemas: tuple[Any, Any] | None = None,
    ) -> None:
        self.encoder = encoder
        self.arrow = arrow
        self.fields = fields
        self.location: str | None = None
        #: Whether the table's own primary key was asked for (its REST metadata). A layout
        #: from the table's write stream knows only the serializer's key: a change-data-capture
        #: row then asks for the table's (:meth:`TableCatalog.layout`).
        self.table_key_known = True
        #: Built from the serializer's declared schema without asking the table: what the
        #: table refuses of it is checked against the table's own layout before it counts
        #: (:mod:`pyflink_gcp.bigquery.stream_lookup`).
        self.assumed = False
        if writer_schemas is None:
            writer_schemas = (
                ProtoSchema(proto_descriptor=encoder.descriptor),
                ProtoSchema(proto_descriptor=encoder.cdc_descriptor),
            )
        self.writer_schemas = writer_schemas

    def with_location(self, location: str | None) -> TableLayout:
        """A layout of another table of this schema, at ``location``: the same encoders and
        writer schemas."""
        layout = TableLayout(self.encoder, self.arrow, self.fields, self.writer_schemas)
        layout.location = location
        layout.table_key_known = self.table_key_known
        return layout

    @staticmethod
    def of(
        fields: Any,
        primary_key: tuple[str, ...] = (),
        *,
        row_format: RowFormat = RowFormat.ARROW,
        ignore_unknown_values: bool = False,
    ) -> TableLayout:
        """The layout of a table with these columns. Raises SchemaNotSupportedError."""
        encoder = RowEncoder(fields, primary_key, ignore_unknown_values=ignore_unknown_values)
        arrow = None
        if row_format is RowFormat.ARROW:
            arrow = ArrowEncoder.for_schema(fields, ignore_unknown_values=ignore_unknown_values)
        return TableLayout(encoder, arrow, tuple(fields))


def schema_key(fields: Sequence[Any]) -> tuple[Any, ...]:
    """What the encoders of a schema depend on: each column's name, type and mode, nested
    fields included (not descriptions, policy tags or defaults, which they never read)."""
    return tuple(
        (
            field.name,
            str(field.field_type).upper(),
            (field.mode or "NULLABLE").upper(),
            schema_key(getattr(field, "fields", None) or ()),
        )
        for field in fields
    )


class EncoderCache:
    """The encoders of the schemas a subtask met most recently, shared by their tables.

    A layout is per table (its location is its own); its encoder, Arrow encoder, fields and
    writer schemas are those of the first table seen with the same :func:`schema_key`, primary
    key and encoding options. They are read-only once built, so the threads that send many
    tables' requests use them at once. At most ``capacity`` schemas are kept (least recently
    used out); a writer holding encoders that fell out keeps them until it is closed.

    Thread-safe: the catalog's metadata threads call :meth:`layout` concurrently.
    """

    def __init__(self, capacity: int = SHARED_SCHEMAS) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[Any, ...], TableLayout] = OrderedDict()
        self._lock = threading.Lock()
        #: Layouts built (a schema not held yet) and shared (a schema held).
        self.built = 0
        self.shared = 0

    def __len__(self) -> int:
        return len(self._entries)

    def layout(
        self,
        fields: Sequence[Any],
        primary_key: tuple[str, ...] = (),
        *,
        row_format: RowFormat = RowFormat.ARROW,
        ignore_unknown_values: bool = False,
    ) -> TableLayout:
        """A new layout for a table of these columns, with shared encoders.

        Raises:
            SchemaNotSupportedError: The sink cannot write this schema (never cached).
        """
        key = (schema_key(fields), tuple(primary_key), row_format, ignore_unknown_values)
        with self._lock:
            known = self._entries.get(key)
            if known is not None:
                self._entries.move_to_end(key)
                self.shared += 1
        if known is None:
            # Built outside the lock: a schema's encoders take a millisecond or more, and other
            # metadata threads may be looking up tables of known schemas meanwhile.
            built = TableLayout.of(
                fields,
                primary_key,
                row_format=row_format,
                ignore_unknown_values=ignore_unknown_values,
            )
            with self._lock:
                # Another thread may have built the same schema meanwhile: keep one.
                known = self._entries.setdefault(key, built)
                self._entries.move_to_end(key)
                self.built += 1
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
        return known.with_location(None)


class TableCatalog:
    """Looks tables up and creates them for the writers of one sink subtask.

    Thread-safe: metadata threads call :meth:`layout` concurrently. The REST client is created
    on first use. A creation takes its token of the subtask's creation budget
    (:class:`~pyflink_gcp.core.creation.CreationBudget`, ``max_created_destinations`` per
    ``max_created_destinations_per``) when it is attempted, so that concurrent creations cannot
    overshoot the bound, and gives it back if it created nothing.
    """

    def __init__(
        self,
        *,
        sink_name: str,
        resolver_name: str,
        serializer: Any,
        options: BigQueryWriterOptions,
        create_disposition: CreateDisposition,
        rest_endpoint: str | None,
        retry: RetryPolicy,
    ) -> None:
        self.sink_name = sink_name
        self.resolver_name = resolver_name
        self.serializer = serializer
        self.options = options
        self.create_disposition = create_disposition
        self.retry = retry
        self.budget = CreationBudget(
            options.max_created_destinations, options.max_created_destinations_per
        )
        self._endpoint = resolve_rest_endpoint(rest_endpoint)
        #: Where the REST calls go, for error messages.
        self.endpoint_name = (
            self._endpoint.http_url if self._endpoint.host else "https://bigquery.googleapis.com"
        )
        # One REST attempt never outlasts the retry deadline; the library's own retry is off
        # (``retry=None`` on every call) so the sink's policy alone decides.
        self._timeout_s = retry.attempt_timeout(_REST_TIMEOUT_S)
        self._lock = threading.Lock()
        self._rest: Any = None
        #: The encoders of the schemas met, shared by the tables of one schema.
        self.encoders = EncoderCache()
        #: Table schema updates this subtask made (``schema_update``; metric schemaUpdates).
        self.schema_updates = 0

    @property
    def tables_created(self) -> int:
        """Tables this subtask created."""
        return self.budget.created

    def close(self) -> None:
        """Close the REST client, if one was opened."""
        with self._lock:
            rest, self._rest = self._rest, None
        if rest is not None:
            rest.close()

    def layout(self, destination: TableDestination) -> TableLayout:
        """Fetch (or create) the table and build its encoders. Runs on a metadata thread.

        A partition's writer (``t$20240101``) looks up, creates and updates its table ``t``.
        """
        destination = destination.base
        table = self._get_or_create(destination)
        # The serializer's schema, asked for once (its schema() runs once per table writer).
        evolving = self.options.schema_update is not SchemaUpdate.NONE
        schema = self.serializer_schema(destination) if evolving else None
        if schema is not None:
            table = self._evolve(destination, table, schema)
        primary_key: tuple[str, ...] = ()
        constraints = table.table_constraints
        if constraints is not None and constraints.primary_key is not None:
            primary_key = tuple(constraints.primary_key.columns)
        if not primary_key and (schema is not None or not evolving):
            # The table's metadata may not carry the key (an emulator drops it): fall back on
            # the key the serializer declares for the table (its schema asked for once: not
            # again when an evolving sink's serializer gave none).
            primary_key = self.declared_key(destination, schema)
        location = getattr(table, "location", None)
        return self.layout_of(destination, table.schema, primary_key, location)

    def layout_of(
        self,
        destination: TableDestination,
        fields: Sequence[Any],
        primary_key: tuple[str, ...],
        location: Any,
    ) -> TableLayout:
        """The layout of a table with these columns, key and location, its encoders shared
        with the tables of the same schema."""
        try:
            layout = self.encoders.layout(
                fields,
                primary_key,
                row_format=self.options.row_format,
                ignore_unknown_values=self.options.unknown_fields is UnknownFields.IGNORE,
            )
        except SchemaNotSupportedError as exc:
            raise ConfigurationError(
                f"sink '{self.sink_name}': table {destination.base.table_id}: {exc}"
            ) from exc
        layout.location = location if isinstance(location, str) and location else None
        return layout

    def _evolve(self, destination: TableDestination, table: Any, schema: TableSchema) -> Any:
        """The table after adding what the serializer's ``schema`` has and it lacks
        (``schema_update``); logged and counted when this subtask changed it."""
        client = self._client(destination.project)
        table_id = destination.table_id
        where = f"sink '{self.sink_name}': table {table_id}"

        def get() -> Any:
            return self.retry.call(
                lambda: client.get_table(table_id, retry=None, timeout=self._timeout_s),
                f"{where}: get table at {self.endpoint_name}",
            )

        def patch(changed: Any) -> Any:
            return self.retry.call(
                lambda: client.update_table(
                    changed, ["schema"], retry=None, timeout=self._timeout_s
                ),
                f"{where}: update the schema at {self.endpoint_name}",
            )

        try:
            table, changes = update_schema(
                get, patch, table, schema.fields, self.options.schema_update, where
            )
        except gexc.BadRequest as exc:
            raise SchemaUpdateError(f"{where}: BigQuery refused the schema update: {exc}") from exc
        if changes:
            with self._lock:
                self.schema_updates += 1
            _LOG.info(
                "%s: updated the schema (%s): %s",
                where,
                self.options.schema_update.name,
                "; ".join(changes),
            )
        return table

    def declared_key(
        self, destination: TableDestination, schema: TableSchema | None = None
    ) -> tuple[str, ...]:
        """The primary key the serializer declares for the table, from ``schema`` if it was
        asked for already; () without one. What a table's metadata (an emulator's, a stream's
        schema) does not carry."""
        if schema is None:
            schema = self.serializer_schema(destination)
        return () if schema is None else tuple(schema.primary_key)

    def serializer_schema(self, destination: TableDestination) -> TableSchema | None:
        """The schema the serializer gives the table (a TableSchema, or SchemaFields converted
        into one), or None."""
        if not has_schema(self.serializer):
            return None
        what = f"serializer {describe_callable(self.serializer)} schema()"
        try:
            schema = self.serializer.schema(destination)
        except Exception as exc:
            raise SerializerError(
                f"sink '{self.sink_name}': {what} raised {type(exc).__name__}: {exc} for table "
                f"{destination.table_id}"
            ) from exc
        try:
            return as_table_schema(schema)
        except (TypeError, ValueError) as exc:
            raise SerializerError(
                f"sink '{self.sink_name}': {what} for table {destination.table_id}: {exc}"
            ) from exc

    def _client(self, project: str) -> Any:
        with self._lock:
            if self._rest is None:
                self._rest = rest_client(self._endpoint, project)
            return self._rest

    def _get_or_create(self, destination: TableDestination) -> Any:
        client = self._client(destination.project)
        table_id = destination.table_id
        try:
            return self.retry.call(
                lambda: client.get_table(table_id, retry=None, timeout=self._timeout_s),
                f"sink '{self.sink_name}': get table {table_id} at {self.endpoint_name}",
            )
        except gexc.NotFound:
            pass
        if self.create_disposition is CreateDisposition.CREATE_NEVER:
            raise DestinationNotFoundError(
                f"sink '{self.sink_name}': table {table_id} does not exist and the create "
                f"disposition is CREATE_NEVER (resolver {self.resolver_name})"
            )
        return self._create(destination)

    def _create(self, destination: TableDestination) -> Any:
        budget = self.budget
        # Taken when attempted (metadata threads create concurrently); given back when the
        # creation fails, or another subtask created the table first.
        if not budget.take():
            raise budget.exceeded(
                sink=self.sink_name,
                what=f"creating table {destination.table_id}",
                noun="tables",
                resolver=self.resolver_name,
                owner=type(self.options).__name__,
            )
        try:
            return self._create_counted(destination)
        except BaseException:
            budget.give_back()
            raise

    def _create_counted(self, destination: TableDestination) -> Any:
        from google.cloud import bigquery

        table_id = destination.table_id
        schema = self.serializer_schema(destination)
        if schema is None:
            raise DestinationNotFoundError(
                f"sink '{self.sink_name}': table {table_id} does not exist and serializer "
                f"{describe_callable(self.serializer)} gives no schema() to create it with"
            )
        table = bigquery.Table(table_id)
        # Schema, primary key, clustering, partitioning, labels, description, KMS key: the
        # schema of this destination knows them all (each destination may have its own).
        schema.apply_to(table)
        client = self._client(destination.project)
        what = f"sink '{self.sink_name}': create table {table_id} at {self.endpoint_name}"
        # Asked first, under the retry policy: some backends answer a create in a missing
        # dataset with an internal error rather than 404, and then a definite answer is hard
        # to get from a server that is also busy (the emulator drops its connection too).
        if not self._dataset_exists(destination):
            raise self._no_dataset(destination)
        backoff = self.retry.backoffs()
        while True:
            try:
                created = client.create_table(table, retry=None, timeout=self._timeout_s)
            except gexc.Conflict:
                # Another subtask created it first: not counted against this subtask.
                existing = self.retry.call(
                    lambda: client.get_table(table_id, retry=None, timeout=self._timeout_s), what
                )
                self.budget.give_back()
                return existing
            except gexc.NotFound:
                raise self._no_dataset(destination) from None
            except Exception as exc:
                if not self.retry.is_transient(exc):
                    raise WriteError(f"{what} failed: {status_name(exc)}: {exc}") from exc
                # Some backends answer a create in a missing dataset with an internal error.
                if self._dataset_missing(destination):
                    raise self._no_dataset(destination) from exc
                backoff.wait_or_raise(exc, what)
                continue
            _LOG.info("%s: created table %s", self.sink_name, table_id)
            return created

    def _dataset_exists(self, destination: TableDestination) -> bool:
        client = self._client(destination.project)
        dataset = f"{destination.project}.{destination.dataset}"

        def attempt() -> bool:
            try:
                client.get_dataset(dataset, retry=None, timeout=self._timeout_s)
            except gexc.NotFound:
                return False
            return True

        return bool(
            self.retry.call(
                attempt,
                f"sink '{self.sink_name}': look up dataset {dataset} at {self.endpoint_name}",
            )
        )

    def _dataset_missing(self, destination: TableDestination) -> bool:
        client = self._client(destination.project)
        dataset = f"{destination.project}.{destination.dataset}"
        # Twice: a server that answered the create with an internal error may have dropped the
        # pooled connection too (the emulator does), which fails the first request on it.
        for _ in range(2):
            try:
                client.get_dataset(dataset, retry=None, timeout=self._timeout_s)
            except gexc.NotFound:
                return True
            except Exception:  # noqa: BLE001 - only a definite NotFound answers the question
                continue
            return False
        return False

    def _no_dataset(self, destination: TableDestination) -> DestinationNotFoundError:
        return DestinationNotFoundError(
            f"sink '{self.sink_name}': cannot create table {destination.table_id}: dataset "
            f"{destination.project}.{destination.dataset} does not exist (the sink creates "
            "tables, not datasets)"
        )


def schema_updates(catalog: TableCatalog | None) -> int:
    """The table schema updates a subtask's catalog made (0 before it opened)."""
    return 0 if catalog is None else catalog.schema_updates


def open_metadata(factory: Any, subtask_index: int) -> tuple[TableCatalog, ThreadPoolExecutor]:
    """A writer factory's table catalog and the metadata threads that run its lookups.

    ``factory`` is any BigQuery writer factory: every one carries ``sink_name``,
    ``resolver_name``, ``serializer``, ``options``, ``create_disposition``, ``rest_endpoint``
    and ``retry``. The threads are the factory's own, apart from any it sends with: a writer
    waits for its table's metadata, which must not queue behind it.
    """
    catalog = TableCatalog(
        sink_name=factory.sink_name,
        resolver_name=factory.resolver_name,
        serializer=factory.serializer,
        options=factory.options,
        create_disposition=factory.create_disposition,
        rest_endpoint=factory.rest_endpoint,
        retry=factory.retry,
    )
    threads = ThreadPoolExecutor(
        max_workers=factory.options.metadata_threads,
        thread_name_prefix=f"{factory.sink_name}-{subtask_index}-meta",
    )
    return catalog, threads
