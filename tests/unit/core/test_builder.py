"""The sink builder base: writer options by their shared names, creation, callable adaptation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pyflink_gcp.core import ConfigurationError, CreateDisposition
from pyflink_gcp.core.functions import RecordOnly
from pyflink_gcp.core.options import WriterOptions
from tests.support.fakes import FileDestination, FileOptionsBuilder, FileSinkBuilder


def _builder() -> FileSinkBuilder:
    return FileSinkBuilder().set_destination_resolver(lambda r, c: FileDestination.of("a"))


def _to_element(record):
    return record


def test_the_shared_options_reach_the_config_by_their_shared_names():
    options = (
        FileOptionsBuilder()
        .max_buffer_time(timedelta(milliseconds=250))
        .max_buffered_records(77)
        .idle_timeout(timedelta(minutes=2))
        .max_active_destinations(9)
        .per_destination_metrics()
        .build()
    )
    config = _builder().set_serializer(lambda r, c: r).set_writer_options(options).build()
    assert config.max_buffer_time_ms == 250 and config.max_buffered_records == 77
    assert config.idle_timeout_s == 120.0 and config.max_active == 9
    assert config.per_destination_metrics is True


def test_writer_options_of_another_type_are_refused_naming_the_right_one():
    with pytest.raises(ConfigurationError, match="set_writer_options\\(\\) takes FileOptions"):
        _builder().set_writer_options(WriterOptions())


def test_a_one_argument_serializer_is_adapted_once_at_build():
    config = _builder().set_serializer(_to_element).build()
    assert isinstance(config.serializer, RecordOnly) and config.serializer(5, None) == 5


def test_the_create_disposition_is_the_core_enum():
    builder = _builder().set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
    assert builder.creates_destinations
    with pytest.raises(ConfigurationError, match="CREATE_NEVER or CREATE_IF_NEEDED"):
        builder.set_create_disposition("CREATE_IF_NEEDED")  # type: ignore[arg-type]
