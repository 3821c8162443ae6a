"""Routing: one template syntax for destination names, and what each service accepts as a name.

``Template("orders_{tenant}_{event_time:%Y%m%d}", sanitizer=names.bigquery_table_id)`` renders a
name per record from its fields and event time; the SQL connectors take the same syntax in their
options. See ``docs/templates.md``.
"""

from pyflink_gcp.routing import names
from pyflink_gcp.routing.names import NameRule
from pyflink_gcp.routing.templates import Template, TemplateError, TemplateValueError

__all__ = ["NameRule", "Template", "TemplateError", "TemplateValueError", "names"]
