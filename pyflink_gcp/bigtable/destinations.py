"""The Bigtable destination value: a table, named ``projects/{p}/instances/{i}/tables/{t}``."""

from __future__ import annotations

import re

from pyflink_gcp.core.types import Destination, with_project

# Bigtable's own id rules, checked here so a resolver bug fails on the record that caused it
# (the resolver's error names the record) rather than later as an RPC error naming nothing.
_TABLE_ID = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}")
_INSTANCE_ID = re.compile(r"[a-z][-a-z0-9]{0,32}")
_PROJECT_ID = re.compile(r"[-a-z0-9.:]{1,100}")

# Resolvers call ``of`` once per record; most jobs name a handful of tables, so the validated
# value is cached and the hot path is one dict lookup. Bounded so that a resolver naming a new
# table per record cannot grow it without limit.
_CACHE: dict[tuple[str, str, str], TableDestination] = {}
_CACHE_MAX = 4096


class TableDestination(Destination):
    """A Bigtable table: what a Bigtable sink's destination resolver returns.

    Immutable; equality, hash and ``str()`` are the resource name, so two values built
    separately for the same table reach the same batcher.

    Example:
        ``TableDestination.of("my-project", "my-instance", "events_20260101")``
    """

    __slots__ = ()

    def __init__(self, project: str, instance: str, table: str) -> None:
        for what, value, pattern in (
            ("project", project, _PROJECT_ID),
            ("instance", instance, _INSTANCE_ID),
            ("table", table, _TABLE_ID),
        ):
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ValueError(
                    f"invalid Bigtable {what} id {value!r} in TableDestination.of"
                    f"({project!r}, {instance!r}, {table!r})"
                    + (
                        ": table ids are 1-50 characters of [-_.a-zA-Z0-9], not starting "
                        "with '-' or '.'"
                        if what == "table"
                        else ""
                    )
                )
        self._init_name(f"projects/{project}/instances/{instance}/tables/{table}")

    @staticmethod
    def of(*ids: str) -> TableDestination:
        """``of(project, instance, table)``: the table ``table`` of Bigtable instance
        ``instance`` in ``project``; ``of(instance, table)`` is in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name.

        Raises:
            ValueError: An id that Bigtable would reject, or no project given and the variable
                unset.
        """
        if len(ids) == 3:
            project, instance, table = ids
        else:
            project, instance, table = with_project(
                "TableDestination", ids, ("project", "instance", "table")
            )
        key = (project, instance, table)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        destination = TableDestination(*key)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = destination
        return destination

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def instance(self) -> str:
        return self._name.split("/")[3]

    @property
    def table(self) -> str:
        """The table id (the last part of the resource name)."""
        return self._name.split("/")[5]

    @property
    def instance_name(self) -> str:
        """``projects/{p}/instances/{i}``: the parent of the table in admin calls."""
        return self._name.rsplit("/tables/", 1)[0]
