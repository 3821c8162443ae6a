"""DatabaseDestination: the Spanner sink's one destination."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from pyflink_gcp.spanner import DatabaseDestination


def test_database_destination_value() -> None:
    d = DatabaseDestination.of("my-project", "my-instance", "my_db")
    assert str(d) == "projects/my-project/instances/my-instance/databases/my_db"
    assert (d.project, d.instance, d.database) == ("my-project", "my-instance", "my_db")
    assert d == DatabaseDestination.of("my-project", "my-instance", "my_db")
    assert hash(d) == hash(DatabaseDestination.of("my-project", "my-instance", "my_db"))
    assert pickle.loads(cloudpickle.dumps(d)) == d


@pytest.mark.parametrize(
    "ids", [("", "i1", "db"), ("p", "I", "db"), ("p", "inst", "1db"), ("p", "inst", "d" * 31)]
)
def test_invalid_database_ids(ids: tuple[str, str, str]) -> None:
    with pytest.raises(ValueError, match="invalid Spanner"):
        DatabaseDestination.of(*ids)
