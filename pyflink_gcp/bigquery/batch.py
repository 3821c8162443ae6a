"""One AppendRows request's rows (:class:`Batch`), as the table writer cuts them and the sender
encodes, sends and, when the service rejects some rows, splits them."""

from __future__ import annotations

from typing import Any


class Batch:
    """The rows of one AppendRows request, with what is needed to reject them one by one.

    A batch is *pending* until the sender encodes it (``rows`` and ``arrow`` both None), then
    carries either serialized protobuf rows or one serialized Arrow record batch.
    """

    __slots__ = ("rows", "arrow", "elements", "records", "cdc", "offset")

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

    def subset(self, indexes: list[int]) -> Batch:
        """The rows at ``indexes``, unencoded if this batch was Arrow."""
        rows = self.rows
        return Batch(
            None if rows is None else [rows[i] for i in indexes],
            [self.elements[i] for i in indexes],
            [self.records[i] for i in indexes],
            self.cdc,
        )

    def halves(self) -> tuple[Batch, Batch]:
        """The first and the second half of the rows, unencoded if this batch was Arrow."""
        mid = len(self.elements) // 2
        rows = self.rows
        return (
            Batch(
                None if rows is None else rows[:mid],
                self.elements[:mid],
                self.records[:mid],
                self.cdc,
            ),
            Batch(
                None if rows is None else rows[mid:],
                self.elements[mid:],
                self.records[mid:],
                self.cdc,
            ),
        )
