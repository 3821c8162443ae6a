"""A missing extra is named: importing a sink without its client library raises an ImportError
that says which extra to install, and FILE_LOADS without google-cloud-storage is refused at
``build()`` naming the storage extra.

Each case runs in a fresh interpreter in which the client library's module is blocked (set to
None in ``sys.modules``, which makes importing it raise ImportError), so the test neither
depends on what this environment installed nor disturbs the modules of the other tests.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: package: (a module of its client library, the message's extra).
EXTRAS = {
    "pubsub": ("google.pubsub_v1", "pip install 'pyflink-gcp[pubsub]'"),
    "bigquery": ("google.cloud.bigquery_storage_v1", "pip install 'pyflink-gcp[bigquery]'"),
    "bigtable": ("google.cloud.bigtable", "pip install 'pyflink-gcp[bigtable]'"),
    "cloudtasks": ("google.cloud.tasks_v2", "pip install 'pyflink-gcp[cloudtasks]'"),
    "spanner": ("google.cloud.spanner_v1", "pip install 'pyflink-gcp[spanner]'"),
}


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter where importing ``module`` fails."""
    program = f"import sys\nsys.modules[{module!r}] = None\n{code}"
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("package", EXTRAS)
def test_importing_a_sink_without_its_client_library_names_the_extra(package: str) -> None:
    module, install = EXTRAS[package]
    done = run_without(
        module,
        f"try:\n"
        f"    import pyflink_gcp.{package}\n"
        f"except ImportError as exc:\n"
        f"    print(exc)\n"
        f"else:\n"
        f"    print('imported')\n",
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert message.startswith(f"pyflink_gcp.{package} needs "), message
    assert message.endswith(install), message


def test_file_loads_without_google_cloud_storage_is_refused_at_build_naming_the_extra() -> None:
    done = run_without(
        "google.cloud.storage",
        "from pyflink_gcp.bigquery import (BigQueryFileLoadsOptions, BigQuerySink,\n"
        "    TableDestination, WriteMethod)\n"
        "from pyflink_gcp.core import ConfigurationError\n"
        "builder = (BigQuerySink.builder()\n"
        "    .set_destination_resolver(lambda r, c: TableDestination.of('p', 'd', 't'))\n"
        "    .set_serializer(lambda r, c: r)\n"
        "    .set_write_method(WriteMethod.FILE_LOADS)\n"
        "    .set_file_loads_options(BigQueryFileLoadsOptions.builder()\n"
        "        .staging_location('gs://bucket/prefix').build()))\n"
        "try:\n"
        "    builder.build()\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('built')\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "WriteMethod.FILE_LOADS stages files in Cloud Storage and needs google-cloud-storage: "
        "pip install 'pyflink-gcp[bigquery,storage]'"
    )
