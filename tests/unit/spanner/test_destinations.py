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


def test_a_database_without_project_is_in_google_cloud_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The variable is read when the value is built and becomes part of its resource name."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    short = DatabaseDestination.of("inst", "db1")
    assert short == DatabaseDestination.of("env-project", "inst", "db1")
    assert short.resource_name.startswith("projects/env-project/")
    assert pickle.loads(pickle.dumps(short)) == short
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    assert short.resource_name.startswith("projects/env-project/")
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT is not set"):
        DatabaseDestination.of("inst", "db1")
    with pytest.raises(TypeError, match="GOOGLE_CLOUD_PROJECT"):
        DatabaseDestination.of("db1")
