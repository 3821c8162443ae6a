"""The local emulator stack that the tests, the demo and the benchmarks run against.

Pub/Sub, Bigtable and Spanner use the official emulators of the Google Cloud CLI;
BigQuery (with its Storage Write API) uses ``bqemulator``, GCS ``gcp-storage-emulator``
and Cloud Tasks the Go ``cloud-tasks-emulator``. A small HTTP receiver stands in for
Cloud Tasks targets. See ``docs/emulators.md``.
"""

from pyflink_gcp.tools.emulators.processes import EmulatorError, EmulatorStartError
from pyflink_gcp.tools.emulators.receiver import Receiver, fetch_received
from pyflink_gcp.tools.emulators.scoped import emulators_for
from pyflink_gcp.tools.emulators.stack import EmulatorStack, stop_all_stacks
from pyflink_gcp.tools.emulators.tools import ALL_SERVICES, Tools, cache_root, setup_tools

__all__ = [
    "ALL_SERVICES",
    "EmulatorError",
    "EmulatorStack",
    "EmulatorStartError",
    "Receiver",
    "Tools",
    "cache_root",
    "emulators_for",
    "fetch_received",
    "setup_tools",
    "stop_all_stacks",
]
