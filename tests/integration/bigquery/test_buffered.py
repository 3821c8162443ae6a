"""The BUFFERED_STREAM committer against the emulator, under each answer BigQuery might give to
FlushRows on a finalized stream (its reference is silent; Google's clients read it as
INVALID_ARGUMENT): a set committed again after the stream was finalized is done, whichever."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
    BigQueryWriteGrpcTransport,
)

from pyflink_gcp.bigquery.buffered import BufferedStreamCommitter, StreamCommit
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.bigquery.support import finalized_flush_answer, query
from tests.integration.bigquery.test_emulator_flush_rows import _DESCRIPTOR, _ROW, _buffered_stream

pytestmark = pytest.mark.integration


@pytest.fixture
def writer(stack: EmulatorStack) -> Iterator[BigQueryWriteClient]:
    channel = grpc.insecure_channel(stack.env["BIGQUERY_STORAGE_EMULATOR_HOST"])
    yield BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
    channel.close()


def committer() -> BufferedStreamCommitter:
    c = BufferedStreamCommitter(
        sink_name="buffered", storage_endpoint=None, retry=RetryPolicy(deadline_s=10), threads=2
    )
    c.open(SubtaskInfo("buffered"))
    return c


@pytest.mark.parametrize("answer", ["invalid_argument", "failed_precondition", "flush"])
def test_a_restored_set_committed_again_after_its_stream_was_finalized_is_done(
    writer: BigQueryWriteClient, project: str, answer: str
) -> None:
    stream, table = _buffered_stream(writer, project, 3)
    commit = StreamCommit(table.strip("`"), stream, 2)
    with finalized_flush_answer(answer):
        # A restore flushes the set and finalizes the stream with the last commit; then the
        # job fails again and restores the same checkpoint: the flush meets a finalized stream.
        for _ in range(2):
            c = committer()
            try:
                c.commit([commit], 7, restored=True)
                c.commit([], 8, restored=False, final=True)
            finally:
                c.close()
        state = writer.get_write_stream(
            request=types.GetWriteStreamRequest(name=stream), retry=None, timeout=10
        )
    assert state.name == stream
    assert [r["id"] for r in query(project, f"SELECT id FROM {table} ORDER BY id")] == [0, 1, 2]
    # The first commit finalized it (a final set): the stream takes no more rows.
    request = types.AppendRowsRequest(
        write_stream=stream,
        offset=3,
        proto_rows=types.AppendRowsRequest.ProtoData(
            writer_schema=types.ProtoSchema(proto_descriptor=_DESCRIPTOR),
            rows=types.ProtoRows(serialized_rows=[_ROW(id=3).SerializeToString()]),
        ),
    )
    [response] = list(writer.append_rows(iter([request]), retry=None, timeout=10))
    assert response.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], response
