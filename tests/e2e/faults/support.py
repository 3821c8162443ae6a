"""Running a job whose sink cannot reach its service, and reading how it failed.

Each test builds a sink pointed at an endpoint that refuses connections or one that never
answers (:mod:`tests.support.endpoints`), with a retry deadline of a second, and runs it
on a MiniCluster without restarts: the sink's error ends the job and surfaces from
``env.execute()``. The job's wall time includes its start (several seconds on the 2-core
development machine), so the bound on the wait itself is read from the error: the retry
policy reports how long it retried, which must not exceed the deadline plus one attempt.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tests.support.jobs import make_env, record_stream

#: The retry deadline of every sink in these tests: long enough for several attempts against
#: a refused endpoint (the first backoff is 0.1 s); a silent endpoint's attempt lasts longer.
DEADLINE = timedelta(seconds=1)
#: The timeout of one attempt under that deadline (``RetryPolicy.attempt_timeout``: at least 5 s).
ATTEMPT_TIMEOUT_S = 5.0
#: Job start and teardown on a busy 2-core machine, on top of the deadline and one attempt.
STARTUP_MARGIN_S = 40.0

_RETRIED = re.compile(r"still failing after (\d+) attempts in ([0-9.]+)s")


@dataclass(frozen=True)
class Failure:
    """How a job failed: the error text of its cause chain and the wall time of the run."""

    text: str
    elapsed_s: float

    def retried_for_s(self) -> float | None:
        """Seconds the sink's retry policy spent before giving up, if it reported them."""
        match = _RETRIED.search(self.text)
        return float(match.group(2)) if match else None


def run_until_failure(sink: Any, records: int = 5, record: Any = None) -> Failure:
    """Run ``records`` records into ``sink`` (parallelism 1, no restarts); return the failure.

    Raises:
        AssertionError: The job finished without failing.
    """
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    make = record or (lambda i: {"id": i, "name": f"n{i}"})
    record_stream(env, records, make).sink_to(sink)
    start = time.monotonic()
    try:
        env.execute("unreachable service")
    except Exception as exc:  # noqa: BLE001 - the job's failure, whatever py4j wraps it in
        return Failure(str(exc), time.monotonic() - start)
    raise AssertionError("the job finished although its service cannot be reached")


def assert_bounded_failure(failure: Failure, *names: str) -> None:
    """The job failed within the deadline plus one attempt (plus its start), naming ``names``
    (the sink, the destination, the endpoint)."""
    budget = DEADLINE.total_seconds() + ATTEMPT_TIMEOUT_S
    assert failure.elapsed_s < budget + STARTUP_MARGIN_S, failure
    retried = failure.retried_for_s()
    # The sink's retry policy gave up (not a library's retry, not a hang ended by something
    # else), after at most the deadline plus one attempt.
    assert retried is not None, f"no retry report in the job's error:\n{failure.text[-3000:]}"
    assert retried <= budget + 1.0, failure.text[-2000:]
    print(
        f"\n{names[0]}: gave up after {retried:.1f}s of retries "
        f"(deadline {DEADLINE.total_seconds():.0f}s, one attempt at most {ATTEMPT_TIMEOUT_S:.0f}s); "
        f"job wall time {failure.elapsed_s:.1f}s"
    )
    for name in names:
        assert name in failure.text, f"{name!r} not in the job's error:\n{failure.text[-3000:]}"
