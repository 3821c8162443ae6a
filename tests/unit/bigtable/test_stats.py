"""The subtask's counters, updated from several threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyflink_gcp.bigtable.stats import BigtableWriterStats


def test_requests_and_counters_add_up_across_threads() -> None:
    stats = BigtableWriterStats()
    with ThreadPoolExecutor(4) as pool:
        for n in range(1, 201):
            pool.submit(stats.count_request, n, 2 * n)
            pool.submit(stats.add, entries_retried=1, entries_rejected=2)
    assert stats.requests == 200
    assert stats.entries_sent == sum(range(1, 201))
    assert stats.mutations_sent == 2 * stats.entries_sent
    assert (stats.max_request_entries, stats.max_request_mutations) == (200, 400)
    assert (stats.entries_retried, stats.entries_rejected) == (200, 400)
    assert "_lock" not in repr(stats) and "requests=200" in repr(stats)
