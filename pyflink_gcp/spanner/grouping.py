"""Grouping: buffer many commits' worth of mutations, sort them by table and key, cut commits.

Spanner divides each table's key space into *splits*, served by different servers, and a
commit involves every split its rows fall in: a commit of rows spread over the whole key space
coordinates many participants, one of neighbouring rows few. With ``grouping_factor`` n above 1
(:class:`~pyflink_gcp.spanner.options.SpannerWriterOptions`), the subtask's writer is a
:class:`GroupingSpannerWriter`: it buffers up to n times each commit limit (mutations, bytes,
rows), sorts the buffer by table and primary key (:func:`group_order`), and cuts it into
commits by the limits (:func:`cut_commits`), so that each commit holds a narrow key range of
few tables. This is what Apache Beam's ``SpannerIO.Write.withGroupingFactor`` does.

Order. Writes of different rows do not depend on each other's order, so the sort only has to
keep each row's own mutations in arrival order: it is stable, and two mutations of one row
(same table, same key) stay in the order they came, in one commit or in commits applied one
after the other. A record whose rows have no single key (a delete of several keys or of a key
range, or a record of several mutations, which must share one commit) is a *barrier*: it keeps
its place, and the rows before it are sorted among themselves and committed before it, those
after it after it. What grouping gives up is the order of *different* rows: a foreign key or
an interleaved child written by one record and its parent by another may now reach Spanner
in another order, or in another commit, and be rejected; make such rows one record (a list of
mutations) or leave grouping off.

Encoding. Each row (or deleted key) is encoded once, in :meth:`GroupingSpannerWriter.write`,
into a ``ListValue`` of its own, so a value its column cannot take is rejected there as
without grouping; cutting appends the encoded rows to the commit requests. Nothing is ever
dropped: a checkpoint's flush, a bundle end that sends the buffer, and the end of input sort,
cut and commit everything buffered, and wait for it as without grouping.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any
from uuid import UUID

from google.protobuf import struct_pb2

from pyflink_gcp.core.batching import OpenBatch
from pyflink_gcp.spanner.batch import REQUEST_OVERHEAD, Batch, Shape
from pyflink_gcp.spanner.committer import Committer
from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.options import SpannerWriterOptions
from pyflink_gcp.spanner.serialization import KeyRange, Mutation
from pyflink_gcp.spanner.values import WrongType
from pyflink_gcp.spanner.writer import SpannerWriter

_ListValuePb: Any = struct_pb2.ListValue

#: Not yet looked up (a table's key may be empty: ``()`` is a valid answer).
_UNKNOWN: Any = object()


class Entry:
    """One buffered record: what it is, where it sorts, and what it costs a commit.

    Attributes:
        element: The serializer's output (a Mutation, or a list of them).
        record: The input record, for failures.
        order: Where the record sorts: its table, then (kind, value) per key column (see
            :func:`sort_value`); None for a barrier.
        shape: The shape of its one row (None for a barrier).
        row: Its one row or deleted key, encoded (None for a barrier, encoded when cut).
        cost: Its mutations, as Spanner counts them.
        size: Its encoded bytes (a barrier's include the headers of its mutations).
        rows: Rows written plus keys and ranges deleted.
    """

    __slots__ = ("element", "record", "order", "shape", "row", "cost", "size", "rows")

    def __init__(
        self,
        element: Any,
        record: Any,
        order: tuple[Any, ...] | None,
        shape: Shape | None,
        row: Any,
        cost: int,
        size: int,
        rows: int,
    ) -> None:
        self.element = element
        self.record = record
        self.order = order
        self.shape = shape
        self.row = row
        self.cost = cost
        self.size = size
        self.rows = rows


_UTC = UTC


def sort_value(value: Any) -> tuple[Any, Any]:
    """A sort key for one primary-key value: NULL first, then numbers, strings, bytes and
    times, each in their natural order, like Spanner orders a key column.

    Always two items, (kind, value), so that the keys of several columns concatenate into one
    flat tuple (nested tuples cost the sort, and the garbage collector, several times more).
    Values of different kinds (an INT64 column given ints and strings) still compare, so the
    sort never fails; naive datetimes count as UTC, as the encoder reads them.
    """
    kind = type(value)
    if kind is int or kind is float or kind is Decimal:
        if value != value:  # NaN: placed first among numbers (it equals nothing)
            return (2, -math.inf)
        return (2, value)
    if kind is str:
        return (3, value)
    if value is None:
        return (0, 0)
    if kind is bool:
        return (1, value)
    if kind is bytes:
        return (4, value)
    if isinstance(value, datetime):
        return (5, value if value.tzinfo is not None else value.replace(tzinfo=_UTC))
    if isinstance(value, date):
        return (6, value)
    if isinstance(value, UUID):
        return (3, str(value))
    return (9, f"{kind.__name__}:{value!r}")


_order_key = attrgetter("order")


def group_order(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` sorted by (table, key) between barriers; barriers keep their place.

    The sort is stable: entries of one table and key stay in arrival order.
    """
    out: list[Entry] = []
    run: list[Entry] = []
    for entry in entries:
        if entry.order is None:
            run.sort(key=_order_key)
            out += run
            run = []
            out.append(entry)
        else:
            run.append(entry)
    run.sort(key=_order_key)
    out += run
    return out


def cut_commits(
    ordered: Sequence[Entry], max_mutations: int, max_bytes: int, max_rows: int
) -> list[tuple[list[Entry], int, int, int]]:
    """Cut ordered entries into commits within the three limits, keeping their order.

    A commit ends before the entry that would take it over a limit; an entry over a limit on
    its own is committed alone (Spanner is the judge of it). Bytes are counted as
    :class:`~pyflink_gcp.spanner.batch.Batch` counts them (the request's overhead, a header per
    run of rows of one shape), never less.

    Returns:
        ``(entries, mutations, bytes, rows)`` per commit, in order.
    """
    commits: list[tuple[list[Entry], int, int, int]] = []
    current: list[Entry] = []
    mutations = rows = 0
    size = REQUEST_OVERHEAD
    last: Shape | None = None
    for entry in ordered:
        shape = entry.shape
        need = entry.size if shape is None or shape is last else entry.size + shape.header_bytes
        if current and (
            mutations + entry.cost > max_mutations
            or size + need > max_bytes
            or rows + entry.rows > max_rows
        ):
            commits.append((current, mutations, size, rows))
            current, mutations, size, rows = [], 0, REQUEST_OVERHEAD, 0
            need = entry.size if shape is None else entry.size + shape.header_bytes
        current.append(entry)
        mutations += entry.cost
        size += need
        rows += entry.rows
        last = shape  # after a barrier (None) the next run pays its header: an upper bound
    if current:
        commits.append((current, mutations, size, rows))
    return commits


class GroupingSpannerWriter(SpannerWriter):
    """A :class:`~pyflink_gcp.spanner.writer.SpannerWriter` that sorts before it cuts commits.

    Made by the factory when ``grouping_factor`` is above 1; takes the same arguments. The
    buffer is the writer's :attr:`open_batch` (its age and size drive the bundle-end sends as
    without grouping); it is sorted, cut and committed when it holds ``grouping_factor``
    times a commit limit, and at every flush.
    """

    def __init__(
        self,
        destination: DatabaseDestination,
        committer: Committer,
        options: SpannerWriterOptions,
        **kwargs: Any,
    ) -> None:
        super().__init__(destination, committer, options, **kwargs)
        factor = options.grouping_factor
        self._group_mutations = factor * self._max_mutations
        self._group_bytes = factor * self._max_bytes
        self._group_rows = sys.maxsize if self._max_rows == sys.maxsize else factor * self._max_rows
        #: The buffer: every record accepted since the last cut, in arrival order.
        self.open_batch: OpenBatch[Entry] = OpenBatch()  # type: ignore[assignment]
        self._buffered_mutations = 0
        self._buffered_rows = 0
        #: Per write shape: where its primary-key columns are among its columns (None: the
        #: columns lack a key column, so its rows are barriers and Spanner judges them).
        self._key_positions: dict[Shape, tuple[int, ...] | None] = {}
        #: Groups sorted and cut so far (read by tests, benchmarks and logs).
        self.groups = 0

    # -- accepting records ------------------------------------------------------------------

    def write(self, element: Any, record: Any) -> None:
        entry: Entry | None = None
        if type(element) is Mutation:
            shape = self._shapes.get((element.operation, element.table, element.columns))
            if shape is None:
                shape = self._compile(element, record)
            entry = self._point_entry(element, record, shape)
        if entry is None:
            entry = self._barrier_entry(element, record)
            if entry is None:
                return  # rejected: a value its column cannot take
        elif entry.row is None:
            return  # rejected
        buffer = self.open_batch
        buffer.append(entry, entry.size)
        self.bytes_accepted += entry.size
        self._buffered_mutations += entry.cost
        self._buffered_rows += entry.rows
        if (
            self._buffered_mutations >= self._group_mutations
            or buffer.bytes >= self._group_bytes
            or self._buffered_rows >= self._group_rows
        ):
            self._cut_group()

    def _point_entry(self, m: Mutation, record: Any, shape: Shape) -> Entry | None:
        """The entry of a one-row write or a one-key delete (its ``row`` None if rejected), or
        None when the mutation has no single key (a barrier)."""
        values = m.values
        if shape.is_delete:
            if len(values) != 1 or isinstance(values[0], KeyRange):
                return None
            key = values[0]
            if len(key) != len(shape.encoders):
                return None  # the barrier path rejects it with the reason
        else:
            positions = self._key_positions.get(shape, _UNKNOWN)
            if positions is _UNKNOWN:
                positions = self._positions(shape)
            if positions is None:
                return None
            key = tuple(values[i] for i in positions)
        row = _ListValuePb()
        encoded = row.values
        try:
            for encode, value in zip(
                shape.encoders, key if shape.is_delete else values, strict=True
            ):
                encode(encoded, value)
        except WrongType:
            self._reject(m, record)
            return Entry(m, record, None, shape, None, 0, 0, 0)
        order: tuple[Any, ...] = (shape.table,)
        for v in key:
            order += sort_value(v)
        return Entry(m, record, order, shape, row, shape.cost, row.ByteSize() + 4, 1)

    def _positions(self, shape: Shape) -> tuple[int, ...] | None:
        by_name = {c.lower(): i for i, c in enumerate(shape.columns)}
        try:
            positions: tuple[int, ...] | None = tuple(
                by_name[c.name.lower()] for c in shape.schema.key
            )
        except KeyError:
            positions = None
        self._key_positions[shape] = positions
        return positions

    def _barrier_entry(self, element: Any, record: Any) -> Entry | None:
        """A record that keeps its place: encoded once to check its values and size."""
        parts = self._check_element(element, record)
        cost, rows = self._parts_cost(parts, record)
        try:
            size = self._add_entry_parts(Batch(), parts)
        except WrongType:
            self._reject(element, record)
            return None
        return Entry(element, record, None, None, None, cost, size, rows)

    # -- sorting, cutting, committing ---------------------------------------------------------

    def _cut_group(self) -> None:
        """Sort the buffer, cut it into commits and hand them to the committer thread."""
        entries = self.open_batch.cut()
        self._buffered_mutations = self._buffered_rows = 0
        if not entries:
            return
        self.groups += 1
        for part, mutations, size, rows in cut_commits(
            group_order(entries), self._max_mutations, self._max_bytes, self._max_rows
        ):
            batch = Batch()
            run: list[Any] = []  # encoded rows of one shape, appended together
            shape: Shape | None = None
            for entry in part:
                if entry.row is not None and entry.shape is shape:
                    run.append(entry.row)
                    continue
                if run:
                    batch.add_encoded(shape, run)  # type: ignore[arg-type]
                shape = entry.shape
                if entry.row is not None:
                    run = [entry.row]
                else:
                    run = []
                    self._add_entry_parts(batch, entry.element)
                    shape = None
            if run:
                batch.add_encoded(shape, run)  # type: ignore[arg-type]
            batch.entries = [(entry.element, entry.record) for entry in part]
            batch.mutations, batch.bytes, batch.rows = mutations, size, rows
            self._submit(batch)

    def start_flush(self) -> None:
        if self.open_batch.elements:
            self._cut_group()
