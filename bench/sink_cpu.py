"""The client CPU a sink's writer spends per record, by number of destinations, without Flink.

    python bench/sink_cpu.py [--sinks pubsub,bigquery,bigtable,cloudtasks]
                             [--destinations 1,10000] [--records 100000]
                             [--flush-every 50000] [--latency-ms 0]
                             [--repeats 3] [--max-buffer-time-ms MS]
                             [--max-buffered-records N] [--cloudtasks-sync-channels]
                             [--bigquery-rest-lookups] [--bigtable-answer-in-process]
                             [--bigquery-answer-in-process lookups|appends|both]

``bench/scale.py`` measures whole jobs, whose rates on a shared 2-core machine move with
whatever else runs. This drives one subtask's ``SinkWriter`` directly, in this process,
against the null backend (bench/nullbackend/): records round-robin over D destinations, a
flush (a checkpoint) every ``--flush-every`` records and at the end, and prints the process's
CPU seconds (all threads: the writer, gRPC's threads, event loops and pools) per record, with
its ratio to the fewest destinations measured in the same run, and the backend's calls by
method in the last run (Publish, GetTopic, ...). CPU time moves much less with
the machine's load than a rate does, so it compares trees run one after the other. The
backend's per-destination counts must equal the input, or nothing is printed.

``--bigtable-answer-in-process`` answers every MutateRows in this process (every entry
written) instead of sending it: what is left is the sink's own CPU per table (its writer, batcher
and queue, the event loop), without gRPC or the backend; the entries the answers saw are checked
against the input instead of the backend's counts.

``--bigquery-answer-in-process both`` does the same for BigQuery: a table's ``GetWriteStream``
is answered at once with the stream the backend gave the first table (its schema and location),
and every ``AppendRows`` request on the shared connections with a success, so what is left is
the sink's own CPU per table: its lookup's bookkeeping, writer, sender and connection pool.
``lookups`` or ``appends`` answers only those calls in the process, the others go to the
backend (and are checked against its counts).

``--cloudtasks-sync-channels`` gives the Cloud Tasks writer synchronous gRPC channels instead of
its ``grpc.aio`` ones (``CreateTask`` then starts as a ``grpc.Future`` of the synchronous
channel, as Pub/Sub's Publish does), to compare the two transports' client CPU per task.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._nullbackend import NullBackend, running
from bench.scale import Records, backend_key, build_sink, configure, expected_counts, verify
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.core.sink_writer import SinkWriter

SERVICES = ("pubsub", "bigquery", "bigtable", "cloudtasks")


def one_run(
    backend: NullBackend,
    service: str,
    destinations: int,
    records: int,
    flush_every: int,
    latency_ms: float,
    options: dict[str, Any],
) -> tuple[float, float, dict[str, int], list[float]]:
    """CPU and wall seconds of writing ``records`` records over ``destinations``, the
    backend's calls by method (the part of the name after the last ``/``), and how long each
    ``SinkWriter.flush()`` took, in ms."""
    configure(backend, destinations, latency_ms)
    sink = build_sink(service, **options)
    writer = SinkWriter(sink._sink_config())
    writer.open(SubtaskInfo(sink.name))
    make = Records(destinations)
    inputs = [make(i) for i in range(records)]
    flush_ms: list[float] = []

    def timed_flush() -> None:
        started = time.monotonic()
        writer.flush()
        flush_ms.append((time.monotonic() - started) * 1000)

    try:
        cpu, wall = time.process_time(), time.monotonic()
        for i, record in enumerate(inputs, 1):
            writer.write(record)
            if i % flush_every == 0:
                timed_flush()
        timed_flush()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    finally:
        writer.close()
    expected = expected_counts(records, destinations, 0)
    if _ANSWERED is not None and service == _ANSWERED_SERVICE:
        want = {backend_key(service, d): n for d, n in expected.items()}
        for table, request in _SENT:  # counted once the clock has stopped
            _ANSWERED[table] += _rows_of(request)
        _SENT.clear()
        got, calls = dict(_ANSWERED), {"calls answered in process": sum(_CALLS)}
        _ANSWERED.clear()
        _CALLS.clear()
        if got != want:
            raise RuntimeError(f"{service}: the in-process answers saw {got} rows, not {want}")
        return cpu, wall, calls, flush_ms
    counts = verify(service, backend, expected)
    calls = {method.rsplit("/", 1)[-1]: n for method, n in counts["calls"].items()}
    return cpu, wall, calls, flush_ms


#: Entries (rows) per table the in-process answers saw (``--bigtable-answer-in-process``,
#: ``--bigquery-answer-in-process``), and the service answered so.
_ANSWERED: Counter[str] | None = None
_ANSWERED_SERVICE = ""
_CALLS: list[int] = []
#: The AppendRows requests answered in process, their rows counted after the run.
_SENT: list[tuple[str, Any]] = []


def _rows_of(request: Any) -> int:
    """The rows of an AppendRows request, protobuf or Arrow."""
    if not request.HasField("arrow_rows"):
        return len(request.proto_rows.rows.serialized_rows)
    import pyarrow as pa

    schema = pa.ipc.read_schema(pa.py_buffer(request.arrow_rows.writer_schema.serialized_schema))
    data = pa.py_buffer(request.arrow_rows.rows.serialized_record_batch)
    return int(pa.ipc.read_record_batch(data, schema).num_rows)


def answer_bigtable_in_process() -> None:
    """Answer every MutateRows in this process, every entry written (bench only)."""
    global _ANSWERED
    from pyflink_gcp.bigtable import client
    from pyflink_gcp.bigtable.client import MutateRowsResponsePb

    global _ANSWERED_SERVICE
    answered: Counter[str] = Counter()
    _ANSWERED, _ANSWERED_SERVICE = answered, "bigtable"
    opened = client.BigtableClient.__init__

    async def mutate_rows(request: Any, timeout: float, metadata: Any) -> Any:
        response = MutateRowsResponsePb()
        for index in range(len(request.entries)):
            response.entries.add().index = index
        answered[request.table_name] += len(request.entries)
        _CALLS.append(1)
        yield response

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        self.mutate_rows = mutate_rows

    client.BigtableClient.__init__ = init  # type: ignore[method-assign]


def use_sync_channels() -> None:
    """Give the Cloud Tasks writer synchronous channels (bench only: the comparison above)."""
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    from pyflink_gcp.cloudtasks import client
    from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory
    from pyflink_gcp.core.channels import open_channel

    def open_sync(self: CloudTasksWriterFactory, endpoint: Any) -> list[Any]:
        count = self.options.channel_count
        options = client.channel_options(count)
        return [
            open_channel(endpoint, CloudTasksGrpcTransport, client.DEFAULT_HOST, options)
            for _ in range(count)
        ]

    CloudTasksWriterFactory._open_channels = open_sync  # type: ignore[method-assign]


def use_rest_lookups() -> None:
    """Look BigQuery tables up over REST only (bench only: the comparison above)."""
    from pyflink_gcp.bigquery.writer import BigQueryWriterFactory

    BigQueryWriterFactory.looks_up_streams = False


def answer_bigquery_in_process(which: str) -> None:
    """Answer every GetWriteStream (``lookups``), AppendRows (``appends``) or both in this
    process (bench only)."""
    global _ANSWERED, _ANSWERED_SERVICE
    import asyncio
    from concurrent.futures import Future

    from pyflink_gcp.bigquery import writer
    from pyflink_gcp.bigquery.client import AppendRowsResponse
    from pyflink_gcp.bigquery.stream_lookup import StreamLookups

    answered: Counter[str] = Counter()
    if which != "lookups":
        _ANSWERED, _ANSWERED_SERVICE = answered, "bigquery"
    template: list[Any] = []

    class Answered:
        """The calls of one unary method, each answered with the first table's stream."""

        def __init__(self, real: Any) -> None:
            self._real = real

        def future(self, request: Any, timeout: float, metadata: Any) -> Future[Any]:
            if not template:
                template.append(self._real.future(request, timeout=timeout, metadata=metadata))
            stream = type(template[0].result())()
            stream.CopyFrom(template[0].result())
            stream.name = request.name
            done: Future[Any] = Future()
            done.set_result(stream)
            _CALLS.append(1)
            return done

    class AppendCall:
        """One AppendRows call on the event loop: a success per request, in order."""

        def __init__(self) -> None:
            self._answers: asyncio.Queue[Any] = asyncio.Queue()

        async def write(self, request: Any) -> None:
            _SENT.append((request.write_stream.rsplit("/streams/", 1)[0], request))
            _CALLS.append(1)
            response = AppendRowsResponse()
            response.append_result.SetInParent()
            self._answers.put_nowait(response)

        async def read(self) -> Any:
            return await self._answers.get()

        def cancel(self) -> bool:
            return True

    class AppendChannel:
        """A shared connection's channel whose AppendRows calls answer in the process."""

        def stream_stream(self, method: str, **kwargs: Any) -> Any:
            return lambda **call_kwargs: AppendCall()

        async def close(self) -> None:
            pass

    opened = StreamLookups.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        self._get = Answered(self._get)

    if which != "appends":
        StreamLookups.__init__ = init  # type: ignore[method-assign]
    if which != "lookups":
        writer.open_append_channel = lambda endpoint, interceptors=(): AppendChannel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sinks", default="pubsub")
    parser.add_argument("--destinations", default="1,10000")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--flush-every", type=int, default=50_000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-buffer-time-ms", type=int, default=None)
    parser.add_argument("--max-buffered-records", type=int, default=None)
    parser.add_argument("--cloudtasks-sync-channels", action="store_true")
    parser.add_argument("--bigquery-rest-lookups", action="store_true")
    parser.add_argument("--bigtable-answer-in-process", action="store_true")
    parser.add_argument(
        "--bigquery-answer-in-process", choices=("lookups", "appends", "both"), default=None
    )
    args = parser.parse_args()
    if args.bigtable_answer_in_process:
        answer_bigtable_in_process()
    if args.bigquery_answer_in_process:
        answer_bigquery_in_process(args.bigquery_answer_in_process)
    if args.cloudtasks_sync_channels:
        use_sync_channels()
    if args.bigquery_rest_lookups:
        use_rest_lookups()
    services = [s for s in args.sinks.split(",") if s]
    if set(services) - set(SERVICES):
        parser.error(f"choose sinks from {SERVICES}")
    destinations = [int(d) for d in args.destinations.split(",")]
    options = {
        "max_buffer_time_ms": args.max_buffer_time_ms,
        "max_buffered_records": args.max_buffered_records,
    }
    warnings.filterwarnings("ignore")
    print(
        f"{'sink':>10} {'dest':>7} {'CPU µs/record':>14} {'ratio':>6} {'records/s':>10} "
        f"{'flush ms':>12} calls a run"
    )
    with running() as backend:
        for service in services:
            base = None
            for d in destinations:
                cpus, rates, flushes = [], [], []
                for _ in range(args.repeats):
                    cpu, wall, calls, flush_ms = one_run(
                        backend, service, d, args.records, args.flush_every,
                        args.latency_ms, options,
                    )  # fmt: skip
                    cpus.append(cpu / args.records * 1e6)
                    rates.append(args.records / wall)
                    flushes.extend(flush_ms)
                per_record = statistics.median(cpus)
                base = base or per_record
                print(
                    f"{service:>10} {d:>7,} {per_record:>14.1f} {per_record / base:>6.2f} "
                    f"{statistics.median(rates):>10,.0f} "
                    f"{statistics.median(flushes):>6.0f}/{max(flushes):<5.0f} "
                    + ", ".join(f"{m} {n:,}" for m, n in sorted(calls.items())),
                    flush=True,
                )
    print(
        f"\n{args.records:,} records a run, a flush every {args.flush_every:,} records and at "
        f"the end, backend latency {args.latency_ms:g} ms, medians of {args.repeats}; one "
        "subtask's writer in this process, no Flink; CPU: this process, all threads; ratio: "
        "to the first destination count; flush ms: SinkWriter.flush() median/largest over the runs; "
        + (
            "every run verified against the entries the in-process answers saw; "
            if args.bigtable_answer_in_process
            or args.bigquery_answer_in_process not in (None, "lookups")
            else "every run verified against the backend's counts; "
        )
        + "calls a run: the backend's calls by method in the last run."
    )


if __name__ == "__main__":
    main()
