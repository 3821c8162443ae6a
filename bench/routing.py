"""What the routing helpers cost per record, next to the hand-written resolvers they replace.

Each pair resolves the same records to the same destinations, timed in one run, with the
hand-written resolver as the baseline (target: a helper at most 1.2x its hand-written twin).
Each repeat times both over every record, in chunks of ``--chunk`` records taken in turn (the
hand-written one first in every other chunk), so that both see the same load on a shared
machine, and over as many passes as make the hand-written resolver's time at least
``--min-time`` seconds (a case of 0.1 µs a record is otherwise a few milliseconds, too short
to time on a loaded machine); the figure is the median of the repeats' sums, in CPU time of
this thread, per record.

- field routing of dict records: ``route_by_field("region", {...}, fallback=...)`` against a
  function doing ``ROUTES.get(record.get("region"), FALLBACK)``;
- field routing of JSON payloads of 1 KB and 10 KB, the routing field first or last:
  ``route_by_field`` on the bytes against ``json.loads`` of the whole payload and a lookup
  (what the Kafka idiom does);
- a name template: ``route_by_template("orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables(...))``
  against a function formatting the same name with ``datetime.strftime`` and building the
  ``TableDestination``, over a steady stream (event times 10 ms apart), one record a minute,
  a new tenant in every record (a new name each time), and one record a day (a new day and a
  new name each time), and the same new tenants with ``sanitize=True`` (each value sanitized
  and each sanitized name checked for a collision). The helper keeps the destinations it built
  by name and the text of each day it formatted (both bounded), which a hand-written resolver
  rarely does, and checks each new name against BigQuery's rules, which it does not.

Run: ``python bench/routing.py [--records N] [--repeats 5] [--chunk 2000] [--min-time 0.05]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.core.functions import as_resolver
from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.pubsub import TopicDestination
from pyflink_gcp.routing import bigquery_tables, route_by_field, route_by_template

REGIONS = ["eu", "us", "pl", "jp", "br"]
ROUTES = {r: TopicDestination.of("p", f"orders-{r}") for r in REGIONS[:3]}
FALLBACK = TopicDestination.of("p", "orders-other")
START_MS = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)


def hand_field(record: dict[str, Any], ctx: Any) -> Any:
    return ROUTES.get(record.get("region"), FALLBACK)


def hand_json(payload: bytes, ctx: Any) -> Any:
    try:
        doc = json.loads(payload)
    except ValueError:
        return FALLBACK
    return ROUTES.get(doc.get("region"), FALLBACK) if isinstance(doc, dict) else FALLBACK


def hand_template(record: dict[str, Any], ctx: Any) -> Any:
    day = datetime.fromtimestamp(ctx.timestamp / 1000, UTC).strftime("%Y%m%d")
    return TableDestination.of("p", "shop", f"orders_{record['tenant']}_{day}")


def payload(i: int, size: int, first: bool) -> bytes:
    body = {f"field_{k}": "x" * 40 for k in range(size // 52)}
    region = REGIONS[i % len(REGIONS)]
    doc = {"region": region, **body} if first else {**body, "region": region}
    return json.dumps(doc).encode()


def timed(resolve: Callable[[Any, Any], Any], records: list[Any], contexts: list[Any]) -> float:
    start = time.thread_time()
    for record, ctx in zip(records, contexts, strict=True):
        resolve(record, ctx)
    return time.thread_time() - start


def paired(
    hand: Callable[[Any, Any], Any],
    helper: Callable[[Any, Any], Any],
    records: list[Any],
    contexts: list[Any],
    chunk: int,
    passes: int = 1,
) -> tuple[float, float]:
    """Both resolvers over every record ``passes`` times, chunk by chunk in turn: their CPU
    seconds."""
    hand_total = helper_total = 0.0
    starts = list(range(0, len(records), chunk)) * passes
    for index, at in enumerate(starts):
        part, part_contexts = records[at : at + chunk], contexts[at : at + chunk]
        if index % 2:
            helper_total += timed(helper, part, part_contexts)
            hand_total += timed(hand, part, part_contexts)
        else:
            hand_total += timed(hand, part, part_contexts)
            helper_total += timed(helper, part, part_contexts)
    return hand_total, helper_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=2_000, help="records per timed chunk")
    parser.add_argument(
        "--min-time", type=float, default=0.05, help="CPU seconds a repeat times at least"
    )
    args = parser.parse_args()
    n = args.records
    plain = [WriterContext()] * n
    # Event times a minute apart (a new second in every record), 10 ms apart (most records
    # share their second with the one before, as in a steady stream), and a day apart (a new
    # day in every record: no formatted day and no built destination is used twice).
    minutes = [WriterContext(timestamp=START_MS + i * 60_000) for i in range(n)]
    steady = [WriterContext(timestamp=START_MS + i * 10) for i in range(n)]
    daily = [WriterContext(timestamp=START_MS + i * 86_400_000) for i in range(n)]
    dicts = [{"id": i, "region": REGIONS[i % len(REGIONS)]} for i in range(n)]
    tenants = [{"id": i, "tenant": ("acme", "globex", "initech")[i % 3]} for i in range(n)]
    new_tenants = [{"id": i, "tenant": f"tenant{i}"} for i in range(n)]
    by_field = route_by_field("region", ROUTES, fallback=FALLBACK)
    by_template = route_by_template(
        "orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables("p", "shop")
    )
    sanitizing = route_by_template(
        "orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables("p", "shop", sanitize=True)
    )
    cases: list[tuple[str, Any, Any, list[Any], list[Any]]] = [
        ("field, dict records", by_field, hand_field, dicts, plain),
        ("template, event times a minute apart", by_template, hand_template, tenants, minutes),
        ("template, event times 10 ms apart", by_template, hand_template, tenants, steady),
        ("template, a new tenant per record", by_template, hand_template, new_tenants, minutes),
        ("same, sanitize=True", sanitizing, hand_template, new_tenants, minutes),
        ("template, event times a day apart", by_template, hand_template, tenants, daily),
    ]
    for size in (1_000, 10_000):
        for first in (True, False):
            records = [payload(i, size, first) for i in range(min(n, 20_000))]
            where = "first" if first else "last"
            cases.append(
                (
                    f"field, {size // 1000} KB JSON, field {where}",
                    by_field,
                    hand_json,
                    records,
                    plain[: len(records)],
                )
            )
    # Timed as the sink calls them: the callable its resolver contract takes.
    cases = [
        (name, as_resolver(helper, "bench"), as_resolver(hand, "bench"), records, contexts)
        for name, helper, hand, records, contexts in cases
    ]
    for _, helper, hand, records, contexts in cases:  # the same results, checked once
        assert [helper(r, c) for r, c in zip(records[:200], contexts, strict=False)] == [
            hand(r, c) for r, c in zip(records[:200], contexts, strict=False)
        ]
    print(f"routing cost per record, median of {args.repeats} (CPU µs/record)")
    print(f"  {'case':<46} {'hand-written':>12} {'helper':>8} {'ratio':>6} {'passes':>6}")
    for name, helper, hand, records, contexts in cases:
        passes = max(1, math.ceil(args.min_time / max(timed(hand, records, contexts), 1e-6)))
        hands, helpers = [], []
        for _ in range(args.repeats):
            hand_seconds, helper_seconds = paired(
                hand, helper, records, contexts, args.chunk, passes
            )
            hands.append(hand_seconds)
            helpers.append(helper_seconds)
        base = statistics.median(hands) / (len(records) * passes) * 1e6
        cost = statistics.median(helpers) / (len(records) * passes) * 1e6
        print(f"  {name:<46} {base:12.2f} {cost:8.2f} {cost / base:6.2f} {passes:>6}")


if __name__ == "__main__":
    main()
