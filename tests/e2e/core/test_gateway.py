"""The Java gateway's standard error is drained: the JVM can write far more than a pipe holds.

Without the drain the writes below block for good once the pipe PyFlink created is full (about
64 KB); that is how a thread-mode job stalled in its operators' ``open()``.
"""

from __future__ import annotations

import threading
import time

from pyflink.java_gateway import get_gateway

from pyflink_gcp.core import gateway
from tests.conftest import GATEWAY_STDERR

#: Many times what a pipe holds.
_VOLUME = 1024 * 1024


def test_the_jvm_writes_a_megabyte_to_its_standard_error_without_blocking() -> None:
    jvm = get_gateway().jvm
    assert gateway.drains, "the gateway was started without a drain"
    drain = gateway.drains[-1]
    before = drain.bytes_read
    line = "pyflink-gcp gateway stderr check " + "x" * 990 + "\n"
    done = threading.Event()

    def write() -> None:
        err = jvm.java.lang.System.err
        for _ in range(_VOLUME // len(line)):
            err.print(line)
        err.flush()
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(60), "the JVM's writes to System.err blocked: nothing reads its pipe"
    deadline = time.monotonic() + 30
    while drain.bytes_read - before < _VOLUME * 0.99 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert drain.bytes_read - before >= _VOLUME * 0.99
    with open(GATEWAY_STDERR, "rb") as f:
        assert b"pyflink-gcp gateway stderr check" in f.read()


def _noisy(i: int) -> int:
    import sys

    sys.stderr.write(f"warning {i} from a thread-mode map " + "x" * 200 + "\n")
    return i


def test_a_thread_mode_job_whose_map_writes_half_a_megabyte_to_stderr_finishes() -> None:
    # In thread mode the map's sys.stderr is the JVM's System.err: without the drain this job
    # stops once the pipe is full and never finishes.
    from pyflink.common import Types

    from tests.support.jobs import make_env

    env = make_env(parallelism=1, checkpoint_ms=None, thread_mode=True)
    env.from_collection(list(range(2000)), type_info=Types.INT()).map(
        _noisy, output_type=Types.INT()
    ).print()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            env.execute("gateway-stderr-thread-mode")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(120)
    assert outcome, "the thread-mode job has not finished after 120 s"
    assert outcome[0] is None, f"the job failed: {outcome[0]}"
    with open(GATEWAY_STDERR, "rb") as f:
        assert b"warning 1999 from a thread-mode map" in f.read()
