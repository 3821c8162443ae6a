"""What the routing helpers cost per record, next to the hand-written resolvers they replace.

Each pair resolves the same records to the same destinations, timed in one run (medians of
interleaved repeats, CPU time of this thread), with the hand-written resolver as the baseline
(target: a helper at most 1.2x its hand-written twin):

- field routing of dict records: ``route_by_field("region", {...}, fallback=...)`` against a
  function doing ``ROUTES.get(record.get("region"), FALLBACK)``;
- field routing of JSON payloads of 1 KB and 10 KB, the routing field first or last:
  ``route_by_field`` on the bytes against ``json.loads`` of the whole payload and a lookup
  (what the Kafka idiom does), which is also the floor of a full parse;
- a name template: ``route_by_template("orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables(...))``
  against a function formatting the same name with ``datetime.strftime`` and building the
  ``TableDestination``. The helper keeps the destinations it built by name (bounded), which a
  hand-written resolver rarely does, and checks each rendered name against BigQuery's rules,
  which it does not.

Run: ``python bench/routing.py [--records N] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.records
    plain = [WriterContext()] * n
    # Event times a minute apart (every record formats its day anew) and 10 ms apart (most
    # records share their second with the one before, as in a steady stream).
    minutes = [WriterContext(timestamp=START_MS + i * 60_000) for i in range(n)]
    steady = [WriterContext(timestamp=START_MS + i * 10) for i in range(n)]
    dicts = [{"id": i, "region": REGIONS[i % len(REGIONS)]} for i in range(n)]
    tenants = [{"id": i, "tenant": ("acme", "globex", "initech")[i % 3]} for i in range(n)]
    by_field = route_by_field("region", ROUTES, fallback=FALLBACK)
    by_template = route_by_template(
        "orders_{tenant}_{event_time:%Y%m%d}", bigquery_tables("p", "shop")
    )
    cases: list[tuple[str, Any, Any, list[Any], list[Any]]] = [
        ("field, dict records", by_field, hand_field, dicts, plain),
        ("template, event times a minute apart", by_template, hand_template, tenants, minutes),
        ("template, event times 10 ms apart", by_template, hand_template, tenants, steady),
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
    print(f"  {'case':<46} {'hand-written':>12} {'helper':>8} {'ratio':>6}")
    for name, helper, hand, records, contexts in cases:
        hands, helpers = [], []
        for _ in range(args.repeats):
            hands.append(timed(hand, records, contexts))
            helpers.append(timed(helper, records, contexts))
        base = statistics.median(hands) / len(records) * 1e6
        cost = statistics.median(helpers) / len(records) * 1e6
        print(f"  {name:<46} {base:12.2f} {cost:8.2f} {cost / base:6.2f}")


if __name__ == "__main__":
    main()
