"""Routing: what each service accepts as a destination name (``names``)."""

from pyflink_gcp.routing import names
from pyflink_gcp.routing.names import NameRule

__all__ = ["NameRule", "names"]
