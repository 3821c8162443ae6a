"""One AppendRows request's rows (:class:`Batch`), as the table writer cuts them and the sender
encodes, sends and, when the service rejects some rows, splits them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyflink_gcp.bigquery.values import RowError

if TYPE_CHECKING:
    from pyflink_gcp.bigquery.tables import TableLayout
    from pyflink_gcp.core.failure import FailedRecord

#: Bytes a protobuf row adds to a request beyond its own encoding (its field tag and length).
ROW_OVERHEAD = 6
#: Requests of fewer rows go as protobuf rows even where Arrow could take them: an Arrow record
#: batch has a fixed cost (building its arrays and serializing the batch) that a few protobuf
#: rows do not reach, and a subtask writing many tables sends most requests with a row or two.
ARROW_MIN_ROWS = 8


class Batch:
    """The rows of one AppendRows request, with what is needed to reject them one by one.

    A batch is *pending* until the sender encodes it (``rows`` and ``arrow`` both None), then
    carries either serialized protobuf rows or one serialized Arrow record batch.
    """

    __slots__ = ("rows", "arrow", "elements", "records", "cdc", "offset", "layout")

    def __init__(
        self,
        rows: list[bytes] | None,
        elements: list[Any],
        records: list[Any],
        cdc: bool,
        arrow: bytes | None = None,
    ):
        self.rows = rows
        self.arrow = arrow
        self.elements = elements
        self.records = records
        self.cdc = cdc
        #: Its offset in a BUFFERED stream once sent (``buffered.StreamOffsets``); None before.
        self.offset: int | None = None
        #: The layout the sender encoded it by (its request carries that layout's writer
        #: schema, whatever the table's layout is by then); None before (or when the table
        #: writer encoded it: change-data-capture rows).
        self.layout: TableLayout | None = None

    @property
    def guessed(self) -> bool:
        """Encoded by an assumed layout (``TableLayout.assumed``): what the table refuses of
        it is checked against the table's own layout before it counts."""
        return self.layout is not None and self.layout.assumed

    def pending(self) -> Batch:
        """The same rows, not encoded (to encode them again by another layout)."""
        return Batch(None, self.elements, self.records, self.cdc)

    def subset(self, indexes: list[int]) -> Batch:
        """The rows at ``indexes``, unencoded if this batch was Arrow."""
        rows = self.rows
        part = Batch(
            None if rows is None else [rows[i] for i in indexes],
            [self.elements[i] for i in indexes],
            [self.records[i] for i in indexes],
            self.cdc,
        )
        part.layout = None if rows is None else self.layout
        return part

    def halves(self) -> tuple[Batch, Batch]:
        """The first and the second half of the rows, unencoded if this batch was Arrow."""
        mid = len(self.elements) // 2
        return self.subset(list(range(mid))), self.subset(list(range(mid, len(self.elements))))


def encode_requests(
    batch: Batch,
    layout: TableLayout,
    max_bytes: int,
    refused: Callable[[Any, Any, RowError], FailedRecord],
    oversized: Callable[[Any, Any, int], FailedRecord],
) -> tuple[list[Batch], list[FailedRecord]]:
    """Encodes a pending batch: one Arrow record batch if the layout has an Arrow encoder, the
    batch has at least :data:`ARROW_MIN_ROWS` rows and fits ``max_bytes`` (halved until it
    does), else protobuf rows cut into requests of at most ``max_bytes``.

    Returns the requests to send and the failed records: rows the encoder refuses
    (``refused``) and single rows over the limit (``oversized``), each one record's failure
    rather than the request's.
    """
    elements = batch.elements
    if layout.arrow is not None and len(elements) >= ARROW_MIN_ROWS:
        data = layout.arrow.encode(elements)
        if data is not None:
            if len(data) <= max_bytes:
                batch.arrow = data
                return [batch], []
            if len(elements) > 1:
                left, right = batch.halves()
                first, failed_first = encode_requests(left, layout, max_bytes, refused, oversized)
                second, failed_second = encode_requests(
                    right, layout, max_bytes, refused, oversized
                )
                return first + second, failed_first + failed_second
            # A single row over the limit: the protobuf path below rejects it by size.
    return encode_rows(batch, layout, max_bytes, refused, oversized)


def encode_rows(
    batch: Batch,
    layout: TableLayout,
    max_bytes: int,
    refused: Callable[[Any, Any, RowError], FailedRecord],
    oversized: Callable[[Any, Any, int], FailedRecord],
) -> tuple[list[Batch], list[FailedRecord]]:
    """Encodes a batch as protobuf rows in requests of at most ``max_bytes`` (see
    :func:`encode_requests`)."""
    encode = layout.encoder.encode
    out: list[Batch] = []
    rows: list[bytes] = []
    kept_elements: list[Any] = []
    kept_records: list[Any] = []
    size = 0
    failed: list[FailedRecord] = []
    for element, record in zip(batch.elements, batch.records, strict=True):
        try:
            data = encode(element)
        except RowError as exc:
            failed.append(refused(element, record, exc))
            continue
        row_size = len(data) + ROW_OVERHEAD
        if row_size > max_bytes:
            failed.append(oversized(element, record, row_size))
            continue
        if rows and size + row_size > max_bytes:
            out.append(Batch(rows, kept_elements, kept_records, False))
            rows, kept_elements, kept_records, size = [], [], [], 0
        rows.append(data)
        kept_elements.append(element)
        kept_records.append(record)
        size += row_size
    if rows:
        out.append(Batch(rows, kept_elements, kept_records, False))
    return out, failed
