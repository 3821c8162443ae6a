"""A standalone Flink cluster on this machine, from the installed apache-flink wheel.

``pyflink-gcp cluster up`` and :class:`StandaloneCluster` start one JobManager and TaskManagers
as separate processes from the wheel's own ``pyflink/bin/`` scripts, with a configuration
directory of their own, so jobs can be submitted with ``flink run -py`` and TaskManagers killed
the way they die on a real cluster. See ``docs/deploy.md``.
"""

from pyflink_gcp.tools.cluster.config import ClusterError, ClusterSettings, flink_home
from pyflink_gcp.tools.cluster.standalone import StandaloneCluster, Submission, TaskManager

__all__ = [
    "ClusterError",
    "ClusterSettings",
    "StandaloneCluster",
    "Submission",
    "TaskManager",
    "flink_home",
]
