"""FlushRows on a BUFFERED stream in the emulator answers as BigQuery does (the launcher's patch).

BigQuery's offset is inclusive, an offset past the last row is OUT_OF_RANGE, one already flushed
ALREADY_EXISTS. A finalized BUFFERED stream refuses FlushRows with INVALID_ARGUMENT by default;
the other answers BigQuery might give can be chosen, and each is checked here.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
    BigQueryWriteGrpcTransport,
)
from google.protobuf import descriptor_pb2

from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.bigquery.support import (
    decoder,
    finalized_flush_answer,
    make_dataset,
    make_table,
    query,
)

pytestmark = pytest.mark.integration

TIMEOUT = 10.0

_DESCRIPTOR = descriptor_pb2.DescriptorProto(
    name="Row",
    field=[
        descriptor_pb2.FieldDescriptorProto(
            name="id",
            number=1,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        ),
    ],
)
_ROW = decoder(_DESCRIPTOR)


@pytest.fixture
def writer(stack: EmulatorStack) -> Iterator[BigQueryWriteClient]:
    channel = grpc.insecure_channel(stack.env["BIGQUERY_STORAGE_EMULATOR_HOST"])
    yield BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
    channel.close()


def _buffered_stream(writer: BigQueryWriteClient, project: str, rows: int) -> tuple[str, str]:
    """A new table with a BUFFERED stream holding ``rows`` rows (ids 0..rows-1) from offset 0."""
    dataset = make_dataset(project, "flush")
    make_table(project, dataset, "t", [("id", "INT64")])
    stream = writer.create_write_stream(
        parent=f"projects/{project}/datasets/{dataset}/tables/t",
        write_stream=types.WriteStream(type_=types.WriteStream.Type.BUFFERED),
        retry=None,
        timeout=TIMEOUT,
    ).name
    request = types.AppendRowsRequest(
        write_stream=stream,
        offset=0,
        proto_rows=types.AppendRowsRequest.ProtoData(
            writer_schema=types.ProtoSchema(proto_descriptor=_DESCRIPTOR),
            rows=types.ProtoRows(
                serialized_rows=[_ROW(id=i).SerializeToString() for i in range(rows)]
            ),
        ),
    )
    responses = list(writer.append_rows(iter([request]), retry=None, timeout=TIMEOUT))
    assert [r.error.code for r in responses] == [0]
    assert responses[0].append_result.offset == 0
    return stream, f"`{project}.{dataset}.t`"


def _flush(writer: BigQueryWriteClient, stream: str, offset: int) -> int:
    request = types.FlushRowsRequest(write_stream=stream, offset=offset)
    return int(writer.flush_rows(request=request, retry=None, timeout=TIMEOUT).offset)


def _ids(project: str, table: str) -> list[int]:
    return [row["id"] for row in query(project, f"SELECT id FROM {table} ORDER BY id")]


def test_flush_offsets_are_inclusive_and_checked_like_bigquery(
    writer: BigQueryWriteClient, project: str
) -> None:
    stream, table = _buffered_stream(writer, project, 5)
    assert _ids(project, table) == []

    assert _flush(writer, stream, 1) == 1
    assert _ids(project, table) == [0, 1]

    with pytest.raises(exceptions.AlreadyExists):
        _flush(writer, stream, 1)
    with pytest.raises(exceptions.AlreadyExists):
        _flush(writer, stream, 0)
    with pytest.raises(exceptions.OutOfRange):
        _flush(writer, stream, 5)
    assert _ids(project, table) == [0, 1]

    assert _flush(writer, stream, 4) == 4
    assert _ids(project, table) == [0, 1, 2, 3, 4]


def test_a_finalized_buffered_stream_refuses_flush_rows_by_default(
    writer: BigQueryWriteClient, project: str
) -> None:
    stream, table = _buffered_stream(writer, project, 3)
    assert _flush(writer, stream, 0) == 0
    finalized = writer.finalize_write_stream(name=stream, retry=None, timeout=TIMEOUT)
    assert finalized.row_count == 3

    for offset in (0, 2):  # flushed already, and never flushed
        with pytest.raises(exceptions.InvalidArgument, match="finalized"):
            _flush(writer, stream, offset)
    assert _ids(project, table) == [0]


def test_a_finalized_stream_answers_failed_precondition_when_chosen(
    writer: BigQueryWriteClient, project: str
) -> None:
    stream, _ = _buffered_stream(writer, project, 3)
    writer.finalize_write_stream(name=stream, retry=None, timeout=TIMEOUT)
    with (
        finalized_flush_answer("failed_precondition"),
        pytest.raises(exceptions.FailedPrecondition),
    ):
        _flush(writer, stream, 1)


def test_a_finalized_buffered_stream_can_be_flushed_to_its_end_when_chosen(
    writer: BigQueryWriteClient, project: str
) -> None:
    stream, table = _buffered_stream(writer, project, 3)
    finalized = writer.finalize_write_stream(name=stream, retry=None, timeout=TIMEOUT)
    assert finalized.row_count == 3

    with finalized_flush_answer("flush"):
        assert _flush(writer, stream, 0) == 0
        assert _ids(project, table) == [0]
        with pytest.raises(exceptions.OutOfRange):
            _flush(writer, stream, 3)
        assert _flush(writer, stream, 2) == 2
    assert _ids(project, table) == [0, 1, 2]
