"""SQL and Table API connectors, run by the DataStream writers: ``gcp-pubsub``, ``gcp-bigquery``,
``gcp-bigtable``, ``gcp-cloudtasks`` and ``gcp-spanner`` (``docs/sql.md``).

A table declared with ``'connector' = 'gcp-pubsub'`` (or another of them) is written by the same
Python writer as the service's DataStream sink: the Java bridge jar holds a table sink factory
per connector, which validates the DDL's options when the statement is planned and runs the
writer as the bridge's checkpoint-marker operator; on the worker :func:`create_writer` maps the
options onto the service's sink builder. Destination options are templates
(``'table' = 'orders_{tenant}_{event_time:%Y%m%d}'``, :mod:`pyflink_gcp.routing.templates`).

Example::

    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink_gcp.table import register

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    register(t_env)
    t_env.execute_sql(\"\"\"
        CREATE TABLE events (id BIGINT, region STRING) WITH (
          'connector' = 'gcp-pubsub', 'project' = 'my-project', 'topic' = 'events-{region}')
    \"\"\")
    t_env.execute_sql("INSERT INTO events VALUES (1, 'eu'), (2, 'us')").wait()

The options of each connector are :data:`pyflink_gcp.table.options.CONNECTORS`.
"""

from __future__ import annotations

from typing import Any

from pyflink_gcp.table.writer import create_committer, create_writer

__all__ = ["create_committer", "create_writer", "register"]


def register(t_env: Any) -> str:
    """Make the connectors available to ``t_env``: the bridge jar on its ``pipeline.jars``.

    The jar is appended to the jars already configured, never replacing them; setting ``pipeline.jars``
    through the table config also puts it on the client's class loader, where the planner finds
    the factories.

    Returns:
        The jar's URL.

    Raises:
        ConfigurationError: There is no jar (a source checkout where ``pyflink-gcp bridge build``
            did not run yet).
    """
    from pyflink.common import Configuration

    from pyflink_gcp.core.bridge import require_jar

    url = require_jar().as_uri()
    config = t_env.get_config()
    current = config.get("pipeline.jars", None)
    jars = Configuration.parse_list_value(current) if current else []
    if url not in jars:
        config.set("pipeline.jars", ";".join([*jars, url]))
    return url
