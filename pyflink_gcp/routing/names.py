"""The naming rule of each service, under the names routing has always given them.

Each rule lives next to its destination type, in the service's ``destinations.py``, which
validates with it; this module re-exports them, so a template checks (and, when asked to,
sanitizes) a name by exactly the rule the destination is built with:

- ``bigquery_table_id``: :data:`pyflink_gcp.bigquery.destinations.TABLE_ID`;
- ``pubsub_topic_id``: :data:`pyflink_gcp.pubsub.destinations.TOPIC_ID`;
- ``cloudtasks_queue_id``: :data:`pyflink_gcp.cloudtasks.destinations.QUEUE_ID`;
- ``bigtable_table_id``: :data:`pyflink_gcp.bigtable.destinations.TABLE_ID`;
- ``spanner_table_name``: :data:`pyflink_gcp.spanner.destinations.TABLE_NAME`.

A rule is imported from its service when it is first used, so routing needs only the extras of
the services a job writes to. :class:`NameRule` itself is in :mod:`pyflink_gcp.core.names`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pyflink_gcp.core.names import NameRule

__all__ = [
    "NameRule",
    "bigquery_table_id",
    "bigtable_table_id",
    "cloudtasks_queue_id",
    "pubsub_topic_id",
    "spanner_table_name",
]

if TYPE_CHECKING:
    bigquery_table_id: NameRule
    pubsub_topic_id: NameRule
    cloudtasks_queue_id: NameRule
    bigtable_table_id: NameRule
    spanner_table_name: NameRule

#: Each re-exported rule: its service's destinations module and its name there.
_RULES = {
    "bigquery_table_id": ("pyflink_gcp.bigquery.destinations", "TABLE_ID"),
    "pubsub_topic_id": ("pyflink_gcp.pubsub.destinations", "TOPIC_ID"),
    "cloudtasks_queue_id": ("pyflink_gcp.cloudtasks.destinations", "QUEUE_ID"),
    "bigtable_table_id": ("pyflink_gcp.bigtable.destinations", "TABLE_ID"),
    "spanner_table_name": ("pyflink_gcp.spanner.destinations", "TABLE_NAME"),
}


def __getattr__(name: str) -> NameRule:
    """A service's rule, imported from its ``destinations.py`` when first asked for."""
    where = _RULES.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = where
    rule: NameRule = getattr(importlib.import_module(module), attribute)
    globals()[name] = rule
    return rule


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_RULES))
