"""A table's schema and location from its default write stream: one gRPC call, no thread.

A table writer needs the table's columns before it can encode a row. The REST lookup
(``tables.get``, :class:`~pyflink_gcp.bigquery.tables.TableCatalog`) costs about 740 µs of a
subtask's CPU per table, mostly the ``requests`` stack, and runs on a metadata thread, one
table after another: a subtask meeting 10,000 new tables in its first checkpoints spends seconds
on them, and a checkpoint waits for every lookup of the tables it writes.

The Storage Write API answers the same question for the table's default stream:
``GetWriteStream`` with the ``FULL`` view returns the stream's table schema and location (Google's
Java client asks it this way before writing to a default stream). Here that call is started on
the subtask's lookup channel, a ``grpc.aio`` channel on the process's event-loop thread
(:func:`~pyflink_gcp.bigquery.client.open_lookup_channel`), at most
:data:`~pyflink_gcp.core.checked.CHECKS_IN_FLIGHT` at a time (:class:`~pyflink_gcp.core.checked.
CheckCalls`), and its answer builds the layout on the loop's thread: no thread waits on it.

What the stream does not say is left to the REST lookup, which also keeps its retries, its
creation of a missing table and its errors naming the table:

- any failed first attempt (the table is missing, the call failed, a column type this module
  does not know) hands the table over to :meth:`TableCatalog.layout` on a metadata thread; an
  endpoint that answers ``UNIMPLEMENTED`` (an emulator without the call) is not asked again;
- the table's primary key is not in a stream's schema. The layout takes the serializer's
  declared key, if any, and says it did not ask the table (``table_key_known``): the table's
  first change-data-capture row asks for its REST metadata before it is encoded;
- a sink that updates table schemas (``schema_update``), or writes BUFFERED streams, looks
  tables up over REST only.

A table need not be asked at all when the serializer declares its schema and its dataset's
tables exist: the layout is then built from that schema (:attr:`TableLayout.assumed`), at the
location an existing table of the same dataset answered (a dataset has one location), and the
table's first request goes out at once. That saves a subtask one call per new table, half the
calls of a table met once per checkpoint, as Google's Java client does when it is given a
schema. The declared schema is a guess about the table, so nothing it encodes is refused on its
word: a row it cannot encode, or any answer but success or a transient error, makes the
table's sender ask for the table's own layout (:meth:`StreamLookups.checked`: the lookup
above, with the creation of a missing table) and encode those rows again by it
(:mod:`pyflink_gcp.bigquery.layout_checks`). Every table is asked first:

- until a table of its dataset has answered on its stream (tables met meanwhile wait for that
  answer instead of each starting a call);
- in a dataset where a table was found missing: its tables are made on demand, and an append
  to a missing table may end the AppendRows connection other tables share;
- when the serializer declares no schema, or under ``UnknownFields.IGNORE`` (whose encoders
  would drop, without a word, a key the declaration lacks and the table has).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from functools import partial
from typing import Any

from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.schema_update import UnknownFields
from pyflink_gcp.bigquery.serialization import has_schema
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout
from pyflink_gcp.core.checked import CHECKS_IN_FLIGHT, CheckCalls
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.retry import status_name

_LOG = logging.getLogger("pyflink_gcp.bigquery")

_GET_WRITE_STREAM = "/google.cloud.bigquery.storage.v1.BigQueryWrite/GetWriteStream"
_GetWriteStreamRequest = storage_types.GetWriteStreamRequest.pb()
_WriteStream = storage_types.WriteStream.pb()
_FULL_VIEW = int(storage_types.WriteStreamView.FULL)

#: ``TableFieldSchema.Type`` → the type name of the table's REST metadata (its legacy names, so
#: that a table looked up either way shares the encoders of its schema).
_TYPES: dict[int, str] = {
    1: "STRING",
    2: "INTEGER",
    3: "FLOAT",
    4: "RECORD",
    5: "BYTES",
    6: "BOOLEAN",
    7: "TIMESTAMP",
    8: "DATE",
    9: "TIME",
    10: "DATETIME",
    11: "GEOGRAPHY",
    12: "NUMERIC",
    13: "BIGNUMERIC",
    14: "INTERVAL",
    15: "JSON",
    16: "RANGE",
}
#: ``TableFieldSchema.Mode`` → the REST mode (0, unspecified, reads as NULLABLE).
_MODES: dict[int, str] = {0: "NULLABLE", 1: "NULLABLE", 2: "REQUIRED", 3: "REPEATED"}


class UnknownColumnType(ValueError):
    """A stream's schema has a column type this module cannot name: the REST lookup decides."""


def storage_fields(fields: Sequence[Any]) -> list[Any]:
    """The ``SchemaField`` s of a Storage Write ``TableSchema`` 's fields, nested ones included.

    Raises:
        UnknownColumnType: A type or mode this module does not know.
    """
    from google.cloud.bigquery import SchemaField

    out = []
    for field in fields:
        kind = _TYPES.get(field.type_)
        mode = _MODES.get(field.mode)
        if kind is None or mode is None:
            raise UnknownColumnType(
                f"column {field.name!r}: type {field.type_}, mode {field.mode} of the stream's "
                "schema"
            )
        extra: dict[str, Any] = {}
        if kind == "RANGE":
            element = _TYPES.get(field.range_element_type.type_)
            if element is None:
                raise UnknownColumnType(f"column {field.name!r}: range element type unknown")
            extra["range_element_type"] = element
        out.append(
            SchemaField(field.name, kind, mode=mode, fields=storage_fields(field.fields), **extra)
        )
    return out


class StreamLookups:
    """Starts the layout lookups of a subtask's new tables on their default streams.

    Args:
        channel: The subtask's lookup channel (an :class:`~pyflink_gcp.core.aio.AsyncChannel`;
            anything whose ``unary_unary(method, ...)`` has ``future(request, timeout,
            metadata)`` starting a call that completes by callback).
        catalog: Builds layouts (shared encoders) and runs the REST lookup a stream's answer
            leaves to it.
        rest_lookups: Runs ``catalog.layout`` for a table (the metadata threads); raises
            RuntimeError once closed.
        timeout_s: One GetWriteStream attempt at most.
    """

    def __init__(
        self,
        channel: Any,
        catalog: TableCatalog,
        rest_lookups: Callable[[TableDestination], Future[TableLayout]],
        timeout_s: float,
    ) -> None:
        self._get = channel.unary_unary(
            _GET_WRITE_STREAM,
            request_serializer=_GetWriteStreamRequest.SerializeToString,
            response_deserializer=_WriteStream.FromString,
        )
        self._catalog = catalog
        self._rest_lookups = rest_lookups
        self._timeout_s = timeout_s
        self._calls = CheckCalls(CHECKS_IN_FLIGHT, f"sink '{catalog.sink_name}'")
        #: Tables whose layout came from their stream, and those handed to the REST lookup.
        self.answered = 0
        self.handed_over = 0
        #: Tables given a layout of the serializer's declared schema without a call, and those
        #: whose sender asked for the table's own afterwards (:meth:`checked`).
        self.assumed = 0
        self.checked_after = 0
        #: False once the endpoint answered that it does not serve GetWriteStream: every later
        #: table goes straight to the REST lookup.
        self.enabled = True
        #: Whether a declared schema may stand for the table (see the module docstring).
        self.assumes = (
            has_schema(catalog.serializer)
            and catalog.options.unknown_fields is not UnknownFields.IGNORE
        )
        #: The location of each dataset one of whose tables' streams answered (so tables of it
        #: exist): (project, dataset) → location (None where the service gives none).
        self._locations: dict[tuple[str, str], str | None] = {}
        #: The lookup that will give each dataset its location, while it runs.
        self._firsts: dict[tuple[str, str], Future[TableLayout]] = {}
        #: Datasets with a table found missing: their new tables are asked first.
        self._doubted: set[tuple[str, str]] = set()

    def layout(self, destination: TableDestination) -> TableLayout | Future[TableLayout]:
        """The table's layout: the serializer's declared one when it may stand for the table
        (see the module docstring), else being looked up. Never blocks.

        A table of a dataset whose first lookup still runs waits for that lookup rather than
        starting its own: a subtask meets its tables in bursts (the first records, the records
        carried to the end of input), and a burst's tables would otherwise all be looked up
        before the first answer came.
        """
        dataset = (destination.project, destination.dataset)
        if not self.assumes or dataset in self._doubted:
            return self.checked(destination)
        if dataset in self._locations:
            declared = self._declared(destination, self._locations[dataset])
            return self.checked(destination) if declared is None else declared
        first = self._firsts.get(dataset)
        if first is not None and not first.done():
            result: Future[TableLayout] = Future()
            first.add_done_callback(partial(self._after_first, destination, result))
            return result
        first = self._firsts[dataset] = self.checked(destination)
        return first

    def checked(self, destination: TableDestination) -> Future[TableLayout]:
        """The table's own layout, being looked up (its stream, else its REST metadata, which
        creates a missing table): never blocks."""
        if not self.enabled:
            return self._rest_lookups(destination)
        result: Future[TableLayout] = Future()
        call = self._calls.start(self._call, destination)
        call.add_done_callback(partial(self._answered, destination, result))
        return result

    def check_later(self, destination: TableDestination) -> Future[TableLayout]:
        """:meth:`checked`, for a table whose assumed layout its sender gives up (counted)."""
        self.checked_after += 1
        return self.checked(destination)

    def _declared(self, destination: TableDestination, location: str | None) -> TableLayout | None:
        """A layout of the serializer's declared schema at ``location``; None when the
        serializer gives none for this table (or one the encoders cannot take): the table is
        asked, and whatever was wrong is reported by that path."""
        catalog = self._catalog
        try:
            schema = catalog.serializer_schema(destination)
            if schema is None or not schema.fields:
                return None
            layout = catalog.layout_of(
                destination, schema.fields, tuple(schema.primary_key), location
            )
        except Exception:  # noqa: BLE001 - the lookup's path raises it with its context
            return None
        layout.assumed = True
        layout.table_key_known = False
        self.assumed += 1
        return layout

    def _after_first(
        self, destination: TableDestination, result: Future[TableLayout], first: Future[TableLayout]
    ) -> None:
        """The dataset's first lookup ended: the table's declared layout at the location it
        gave, else (it failed, or the declaration does not do) the table's own lookup."""
        if result.cancelled():  # the writer closed meanwhile
            return
        dataset = (destination.project, destination.dataset)
        declared = None
        if dataset in self._locations:  # the first table existed: its stream answered
            declared = self._declared(destination, self._locations[dataset])
        if declared is not None:
            _settle(result, declared, None)
        else:
            self._follow(destination, result, self.checked)

    def _call(self, destination: TableDestination) -> Any:
        """Start the table's GetWriteStream (its request built only now: a queued lookup holds
        nothing but the table and its future)."""
        stream = f"{destination}/streams/_default"
        return self._get.future(
            _GetWriteStreamRequest(name=stream, view=_FULL_VIEW),
            timeout=self._timeout_s,
            metadata=(("x-goog-request-params", f"name={stream}"),),
        )

    def close(self) -> None:
        """Start no more calls; tables still queued hand over to the REST lookup, which refuses
        them once closed."""
        self._calls.close()

    def _answered(
        self, destination: TableDestination, result: Future[TableLayout], call: Any
    ) -> None:
        if result.cancelled():  # the writer closed meanwhile: nothing waits for the layout
            return
        try:
            error = call.exception()
        except Exception as exc:  # noqa: BLE001 - cancelled (the channel closed)
            error = exc
        if error is None:
            try:
                stream = call.result()
                layout = self._catalog.layout_of(
                    destination,
                    storage_fields(stream.table_schema.fields),
                    self._catalog.declared_key(destination),
                    stream.location,
                )
            except Exception as exc:  # noqa: BLE001 - the REST lookup decides, with its errors
                error = exc
            else:
                layout.table_key_known = False
                self.answered += 1
                dataset = (destination.project, destination.dataset)
                if self.assumes and dataset not in self._doubted:
                    # The table existed: its dataset's later tables may be assumed to.
                    self._locations[dataset] = stream.location
                _settle(result, layout, None)
                return
        if self.enabled and status_name(error) == "UNIMPLEMENTED":
            self.enabled = False
            _LOG.warning(
                "%s: the Storage Write endpoint does not serve GetWriteStream (%s): tables are "
                "looked up over REST from now on",
                self._catalog.sink_name,
                error,
            )
        _LOG.debug(
            "%s: table %s: no layout from its default stream (%s), asking its metadata",
            self._catalog.sink_name,
            destination.table_id,
            error,
        )
        self.handed_over += 1
        if status_name(error) == "NOT_FOUND":
            # A missing table: its dataset's tables are made on demand, and an append to a
            # missing one would end a connection other tables share. Ask each of them first.
            dataset = (destination.project, destination.dataset)
            self._doubted.add(dataset)
            self._locations.pop(dataset, None)
        self._follow(destination, result, self._rest_lookups)

    def _follow(
        self,
        destination: TableDestination,
        result: Future[TableLayout],
        lookup: Callable[[TableDestination], Future[TableLayout]],
    ) -> None:
        """Complete ``result`` as the table's ``lookup`` completes (the REST lookup raises
        RuntimeError once the metadata threads are shut down: the factory closed)."""
        try:
            source = lookup(destination)
        except RuntimeError as exc:
            _settle(
                result,
                None,
                WriteError(
                    f"sink '{self._catalog.sink_name}': table {destination.table_id}: the "
                    f"writer closed before its lookup ended ({exc})"
                ),
            )
            return
        source.add_done_callback(lambda done: _copy(done, result))


def _copy(source: Future[TableLayout], target: Future[TableLayout]) -> None:
    if source.cancelled():
        _settle(target, None, WriteError("the table's lookup was cancelled: the writer closed"))
    else:
        error = source.exception()
        _settle(target, None if error is not None else source.result(), error)


def _settle(
    result: Future[TableLayout], layout: TableLayout | None, error: BaseException | None
) -> None:
    """Complete ``result`` unless its writer cancelled it (it closed before the lookup ended)."""
    try:
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(layout)  # type: ignore[arg-type]
    except InvalidStateError:
        pass
