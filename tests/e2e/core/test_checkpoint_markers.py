"""The Java bridge's checkpoint markers, in real PyFlink jobs over the file-backed test sink.

The file writer appends a destination's records to its file only in ``flush()`` and logs every
``start_flush()`` (an ordinary bundle end under markers) and ``flush()``. So the event log shows
which bundle ends waited, and the files show what was durable when a worker died.
"""

from __future__ import annotations

import collections
import json
import os

import pytest
from pyflink.common import Row
from pyflink.common.typeinfo import Types

from pyflink_gcp.core import bridge
from pyflink_gcp.tools import bridge_build
from tests.support.fakes import FileDestination, FileSink
from tests.support.jobs import FailOnce, make_env, record_stream, savepoint
from tests.support.restore import Failover

# These jobs need no emulator, but the stack must be up before the first job starts PyFlink's
# JVM: Python workers inherit that JVM's environment, so a JVM started earlier would hide the
# emulator variables from the workers of every later test in the session.
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]

RECORDS = 12_000


def record(i: int) -> dict:
    return {"i": i, "d": f"t{i % 3}"}


def by_d(r: dict, ctx) -> FileDestination:
    return FileDestination.of(r["d"])


def events(directory) -> collections.Counter:
    with open(os.path.join(directory, "_events.jsonl")) as f:
        return collections.Counter(json.loads(line)["event"] for line in f)


def written(directory) -> list[int]:
    ids = []
    for name in os.listdir(directory):
        if not name.startswith("_"):
            with open(os.path.join(directory, name)) as f:
                ids.extend(json.loads(line)["i"] for line in f)
    return ids


def by_d_key(r: dict) -> str:
    return r["d"]


def run(
    tmp_path,
    *,
    markers: bool,
    typed: bool = False,
    keyed: bool = False,
    fused: bool = False,  # False: set_chain_with_upstream(False), the writer's own chain
    thread_mode: bool = False,
    extra: dict[str, str] | None = None,
) -> collections.Counter:
    env = make_env(parallelism=2, checkpoint_ms=300, thread_mode=thread_mode, extra=extra)
    ds = record_stream(env, RECORDS, record)
    resolver, serializer = by_d, None
    if typed:
        ds = ds.map(lambda r: json.dumps(r), output_type=Types.STRING())
        resolver = lambda s, ctx: by_d(json.loads(s), ctx)  # noqa: E731
        serializer = lambda s, ctx: json.loads(s)  # noqa: E731
        if keyed:
            ds = ds.key_by(lambda s: json.loads(s)["d"], key_type=Types.STRING())
    elif keyed:
        ds = ds.key_by(by_d_key)
    # Bundles of 100 records: many ordinary bundle ends per checkpoint.
    ds.sink_to(
        FileSink(
            str(tmp_path),
            resolver,
            serializer,
            max_buffered_records=100,
            checkpoint_markers=markers,
            chain_with_upstream=fused,
        )
    )
    env.execute("checkpoint markers")
    return events(tmp_path)


def test_the_bridge_jar_is_built_and_up_to_date():
    jar = bridge_build.build()
    assert jar.is_file() and jar == bridge.JAR
    assert bridge_build.build() == jar  # the second call finds it up to date


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_with_markers_only_checkpoints_and_the_end_of_input_wait(tmp_path, keyed):
    counts = run(tmp_path, markers=True, keyed=keyed)
    assert sorted(written(tmp_path)) == list(range(RECORDS))
    # 12,000 records in bundles of 100 per subtask: about 120 ordinary bundle ends, each only
    # handing records over, against a few checkpoints (plus the end of input) that wait.
    assert counts["start"] >= 50, counts
    assert counts["flush"] * 3 < counts["start"], counts


@pytest.mark.parametrize(
    "typed, thread_mode",
    [(False, False), (True, False), (False, True)],
    ids=["one map", "two maps, typed", "one map in thread mode"],
)
def test_a_writer_fused_with_the_maps_before_it_keeps_its_markers(tmp_path, typed, thread_mode):
    """By default (``set_chain_with_upstream()``) the maps run inside the writer's marker
    operator (the markers pass them by), and its bundles follow the writer's 100 records, not
    the job's. A thread-mode map runs there too, in the writer's process-mode worker."""
    counts = run(tmp_path, markers=True, typed=typed, fused=True, thread_mode=thread_mode)
    assert sorted(written(tmp_path)) == list(range(RECORDS))
    # 12,000 records in bundles of 100 per subtask: about 120 ordinary bundle ends, each only
    # handing records over, against a few checkpoints (plus the end of input) that wait.
    assert counts["start"] >= 50, counts
    assert counts["flush"] * 3 < counts["start"], counts


@pytest.mark.parametrize("fused", [False, True], ids=["own chain", "fused"])
def test_the_writers_thresholds_hold_when_the_job_sets_its_own_bundle_size(tmp_path, fused):
    """PyFlink adds the job's explicit Python options to every Python operator when the job is
    executed; the bridge's operator keeps its own bundle size (100 records here) against them."""
    job = {"python.fn-execution.bundle.size": "100000", "python.fn-execution.bundle.time": "60000"}
    counts = run(tmp_path, markers=True, fused=fused, extra=job)
    assert sorted(written(tmp_path)) == list(range(RECORDS))
    # Bundles of the job's 100,000 records would give no ordinary bundle end at all.
    assert counts["start"] >= 50, counts


def test_without_markers_every_bundle_end_waits(tmp_path):
    counts = run(tmp_path, markers=False)
    assert sorted(written(tmp_path)) == list(range(RECORDS))
    assert counts["flush"] >= 50, counts
    assert counts["flush"] == counts["start"], counts  # each flush starts its sends itself


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_typed_input_gets_markers_too(tmp_path, keyed):
    """A typed stream's records (a keyed one's values) reach Python as they are, with the
    markers."""
    counts = run(tmp_path, markers=True, typed=True, keyed=keyed)
    assert sorted(written(tmp_path)) == list(range(RECORDS))
    assert counts["start"] >= 50, counts
    assert counts["flush"] * 3 < counts["start"], counts


def row_of(r: dict) -> Row:
    return Row(r["i"], r["d"])


def by_row(row: Row, ctx) -> FileDestination:
    return FileDestination.of(row[1])


def row_to_record(row: Row, ctx) -> dict:
    return {"i": row[0], "d": row[1]}


@pytest.mark.parametrize("shape", ["plain", "keyed", "typed row", "keyed typed row", "fused"])
def test_killed_worker_loses_nothing_when_only_markers_flush(tmp_path, shape):
    """Between checkpoints nothing is durable; the checkpoint must wait for its marker's flush."""
    out = tmp_path / "out"
    out.mkdir()
    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=2, checkpoint_ms=300, process_workers=True, extra=failover.conf())
    stream = record_stream(env, RECORDS, record).map(
        FailOnce(
            str(tmp_path / "failed"),
            lambda r: r["i"] == 9_000,
            hard=True,
            after_checkpoint=failover.checkpoints,
        )
    )
    resolver, serializer = by_d, None
    if shape == "keyed":
        stream = stream.key_by(by_d_key)
    elif shape.endswith("typed row"):
        row_type = Types.ROW_NAMED(["i", "d"], [Types.LONG(), Types.STRING()])
        stream = stream.map(row_of, output_type=row_type)
        resolver, serializer = by_row, row_to_record
        if shape.startswith("keyed"):
            stream = stream.key_by(lambda row: row[1], key_type=Types.STRING())
    stream.sink_to(
        FileSink(
            str(out),
            resolver,
            serializer,
            max_buffered_records=100,
            chain_with_upstream=shape == "fused",
        )
    )
    env.execute("checkpoint markers, killed worker")
    ids = written(out)
    assert (tmp_path / "failed").exists()
    failover.assert_restored()
    assert set(ids) == set(range(RECORDS)), f"lost {len(set(range(RECORDS)) - set(ids))}"
    counts = events(out)
    assert counts["start"] > counts["flush"], counts
    print(f"killed worker: {len(ids) - RECORDS} duplicates, 0 lost; events {dict(counts)}")


@pytest.mark.parametrize("checkpoint_id", [0, 7, 2**40 + 3, -1])
def test_the_java_marker_unpickles_to_the_tag_and_the_id(checkpoint_id):
    """The bytes the Java operator injects are what the Python writer looks for."""
    import pickle

    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    from pyflink_gcp.core.operators import MARKER_TAG
    from pyflink_gcp.core.runtime import _java_class

    add_jars_to_context_class_loader([bridge_build.build().as_uri()])
    get_gateway()  # the gateway JVM loads the jar
    markers = _java_class(bridge.MARKERS)
    data = bytes(markers.pickle(MARKER_TAG, checkpoint_id))
    assert pickle.loads(data) == (MARKER_TAG, checkpoint_id)


def test_markers_go_out_before_barriers_until_the_one_end_of_input_marker():
    """The rule both marker operators share: after the end of input no marker is due."""
    import pickle

    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    from pyflink_gcp.core.operators import END_OF_INPUT, MARKER_TAG
    from pyflink_gcp.core.runtime import _java_class

    add_jars_to_context_class_loader([bridge_build.build().as_uri()])
    get_gateway()
    markers = _java_class(bridge.MARKERS)(MARKER_TAG, False)

    assert markers.idBeforeBarrier(1) == 1
    assert markers.idBeforeBarrier(2) == 2
    assert markers.idAtEndOfInput() == END_OF_INPUT
    assert markers.idAtEndOfInput() is None
    assert markers.idBeforeBarrier(3) is None  # the final checkpoint follows the end of input
    assert pickle.loads(bytes(markers.pickled(2))) == (MARKER_TAG, 2)


@pytest.mark.parametrize("marker_id", [0, 1, 7, 2**31 + 5, -1])
def test_a_typed_streams_marker_watermark_is_what_the_python_writer_looks_for(marker_id):
    """The plain operator sends a typed stream's marker as an element without a value and with
    the watermark ``CheckpointMarkers.bareMarkerWatermark(id)``; Python reads the id back."""
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    from pyflink_gcp.core.operators import BARE_MARKER_WATERMARK, bare_marker_id
    from pyflink_gcp.core.runtime import _java_class
    from tests.support.fakes import WatermarkContext

    add_jars_to_context_class_loader([bridge_build.build().as_uri()])
    get_gateway()
    markers = _java_class(bridge.MARKERS)
    assert markers.BARE_MARKER_WATERMARK == BARE_MARKER_WATERMARK
    watermark = markers.bareMarkerWatermark(marker_id)

    assert bare_marker_id(None, WatermarkContext(watermark)) == marker_id
    # The id the end of input and a first checkpoint carry is still far from any watermark
    # a stream can have: Flink's "none yet" and the earliest event times.
    assert watermark > -(2**63) + 2**61


class Slow:
    """A map that lets a few thousand records a second through, so the job is still running
    when it is stopped."""

    def __call__(self, r: dict) -> dict:
        import time

        time.sleep(0.0005)
        return r


def test_stop_with_savepoint_flushes_at_the_savepoint_marker(tmp_path):
    """No checkpoints and no other wait: only the savepoint's marker can make records durable."""
    import time

    out = tmp_path / "out"
    out.mkdir()
    env = make_env(parallelism=2, checkpoint_ms=None)
    record_stream(env, 2_000_000, record).map(Slow()).sink_to(
        FileSink(str(out), by_d, max_buffered_records=100)
    )
    client = env.execute_async("checkpoint markers, stop with savepoint")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        events = out / "_events.jsonl"
        if events.exists() and events.read_text().count('"start"') >= 10:
            break
        time.sleep(0.2)
    assert written(out) == [], "nothing may be durable before the savepoint"
    savepoint(client, str(tmp_path / "savepoint"), stop=True)
    ids = written(out)
    assert ids and len(ids) == len(set(ids)) and max(ids) < 2_000_000
    with open(out / "_events.jsonl") as f:
        closes = [e for e in map(json.loads, f) if e["event"] == "close"]
    assert closes and all(e["count"] == 0 for e in closes), closes
    print(f"stop with savepoint: {len(ids)} records durable, every writer empty at close")
