"""The Bigtable destination value and the package's exports."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

import pyflink_gcp.bigtable as bigtable
from pyflink_gcp.bigtable import CreateDisposition, RowMutationEntry, TableDestination
from pyflink_gcp.core.options import CreateDisposition as CoreCreateDisposition


def test_the_package_exports_the_client_library_entry_and_the_core_disposition() -> None:
    from google.cloud.bigtable.data import RowMutationEntry as library_class

    assert RowMutationEntry is library_class
    assert CreateDisposition is CoreCreateDisposition
    assert set(bigtable.__all__) >= {
        "BigtableSink",
        "TableDestination",
        "BigtableWriterOptions",
        "TableCreateOptions",
        "RowMutationEntry",
        "CreateDisposition",
    }
    assert all(hasattr(bigtable, name) for name in bigtable.__all__)


def test_table_destination_is_a_value() -> None:
    a = TableDestination.of("p", "inst", "events_20260101")
    b = TableDestination("p", "inst", "events_20260101")
    assert a == b and hash(a) == hash(b) and a is not b
    assert str(a) == "projects/p/instances/inst/tables/events_20260101"
    assert (a.project, a.instance, a.table) == ("p", "inst", "events_20260101")
    assert a.instance_name == "projects/p/instances/inst"
    assert pickle.loads(pickle.dumps(a)) == a
    assert cloudpickle.loads(cloudpickle.dumps(a)) == a
    assert a != TableDestination.of("p", "inst", "events_20260102")
    assert TableDestination.of("p", "inst", "events_20260101") is a  # cached
    with pytest.raises(AttributeError):
        a._name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "args",
    [
        ("p", "inst", ""),
        ("p", "inst", "-t"),
        ("p", "inst", "a/b"),
        ("p", "Inst", "t"),
        ("", "inst", "t"),
        ("p", "inst", "x" * 51),
        ("p", "inst", None),
    ],
)
def test_invalid_ids_are_rejected(args: tuple) -> None:
    with pytest.raises(ValueError, match="invalid Bigtable"):
        TableDestination.of(*args)
