"""Isolating the records a service rejects by splitting the request that carried them.

A batched write call (a Publish, an AppendRows, a Commit) that the service rejects for its
content fails as a whole without saying which record was wrong. The sinks then halve the
request until every rejected record is alone: those go to the failure handler, and every other
record is written. A request of ``n`` records with ``k`` bad ones costs about
``2 k log2(n / k)`` extra calls, and nothing when no record is bad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def isolate_rejected(
    items: Sequence[T],
    send: Callable[[Sequence[T]], None],
    is_record_fault: Callable[[BaseException], bool],
) -> list[tuple[T, BaseException]]:
    """Send ``items`` with ``send``, halving any request rejected for its content.

    Args:
        items: The records of one request, in order.
        send: Sends one request (retrying transient errors itself); raises on failure.
        is_record_fault: Whether an error of ``send`` blames the request's content.

    Returns:
        Each rejected record alone, with the error the service gave it; the rest were sent,
        in their original order relative to each other.

    Raises:
        Exception: Any error of ``send`` that is not a record fault, unchanged.
    """
    rejected: list[tuple[T, BaseException]] = []
    pending: list[Sequence[T]] = [items]
    while pending:
        part = pending.pop()
        if not part:
            continue
        try:
            send(part)
        except Exception as exc:
            if not is_record_fault(exc):
                raise
            if len(part) == 1:
                rejected.append((part[0], exc))
                continue
            middle = len(part) // 2
            # Last in, first out: the first half is sent first, keeping the records' order.
            pending.append(part[middle:])
            pending.append(part[:middle])
    return rejected
