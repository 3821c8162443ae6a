"""Routing without hand-written resolvers: by a field, by a name template, by live rules.

- :func:`route_by_field`: a field's value mapped to a destination, with a fallback for missing
  fields, unmatched values and unparseable JSON payloads.
- :func:`route_by_template`: ``"orders_{tenant}_{event_time:%Y%m%d}"`` rendered per record
  (:class:`Template`, the syntax the SQL connectors take too), every name checked by the
  service's naming rule (:mod:`~pyflink_gcp.routing.names`), values sanitized by it on request
  (``bigquery_tables(..., sanitize=True)``) with a check that no two values merge.
- :class:`LiveRules`: field routing whose rules change while the job runs, from a second
  stream, kept in broadcast state.

See ``docs/routing.md`` and ``docs/templates.md``.
"""

from pyflink_gcp.routing import names
from pyflink_gcp.routing.fields import FieldPath
from pyflink_gcp.routing.names import NameRule
from pyflink_gcp.routing.resolvers import (
    DestinationNames,
    FieldRouter,
    TemplateRouter,
    bigquery_tables,
    bigtable_tables,
    cloudtasks_queues,
    pubsub_topics,
    route_by_field,
    route_by_template,
)
from pyflink_gcp.routing.rules import LiveRules, Routed
from pyflink_gcp.routing.templates import Template, TemplateError, TemplateValueError

__all__ = [
    "DestinationNames",
    "FieldPath",
    "FieldRouter",
    "LiveRules",
    "NameRule",
    "Routed",
    "Template",
    "TemplateError",
    "TemplateRouter",
    "TemplateValueError",
    "bigquery_tables",
    "bigtable_tables",
    "cloudtasks_queues",
    "names",
    "pubsub_topics",
    "route_by_field",
    "route_by_template",
]
