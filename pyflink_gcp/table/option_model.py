"""What a SQL connector option is, and the form in which the Java factories read the list.

:mod:`pyflink_gcp.table.options` declares every connector's options with the types here
(:class:`TableOption`, :class:`Connector`); this module holds what those declarations are made
of and how they are written into the jar's resource (:func:`resource_files`), apart from the
list itself, which changes with every new option while this changes only with the format both
sides read.

Like :mod:`pyflink_gcp.table.options`, this module imports nothing but the standard library: the
bridge build loads both by their file paths, also where the package's dependencies are not
installed (the wheel build).

Kinds and their DDL syntax (parsed the same way in Java):

- ``string``: any text (of ``minimum`` to ``maximum`` UTF-8 bytes, where set);
  ``int``: a decimal integer within ``minimum``/``maximum``;
  ``bool``: ``true`` or ``false``; ``enum``: one of ``choices``;
- ``duration``: an integer and a unit, ``500ms``, ``10s``, ``5min``, ``2h``, ``1d`` (at least
  ``minimum`` and at most ``maximum`` milliseconds);
- ``column``: the name of a column of the table; ``columns``: a comma-separated list of them;
- ``template``: a destination name with placeholders, ``orders_{tenant}_{event_time:%Y%m%d}``
  (:mod:`pyflink_gcp.routing.templates`); the first segment of a placeholder's path must be a
  column, or ``event_time`` / ``processing_time``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Option kinds (see the module docstring).
KINDS = ("string", "int", "bool", "duration", "enum", "column", "columns", "template")
#: Placeholder roots a template may use besides the table's columns.
TIME_ROOTS = ("event_time", "processing_time")
#: Where the writer operator's function comes from: ``module:name``, a top-level name (the
#: payload pickle's GLOBAL takes no dotted attribute).
WRITER_FACTORY = "pyflink_gcp.table:create_writer"
#: Where the committer operator's function comes from, for the write methods that commit after
#: the checkpoint (:attr:`Connector.committing`).
COMMITTER_FACTORY = "pyflink_gcp.table:create_committer"
#: The committer operator's commit tag: :data:`pyflink_gcp.core.commit.COMMIT_TAG` (a unit test
#: keeps them equal; the bridge build loads this file alone, without the package).
COMMIT_TAG = "\x00pyflink-gcp:commit"
#: The resource the Java factories read, and the SPI file that lists them.
RESOURCE = "META-INF/pyflink-gcp/table-options.json"
SERVICES = "META-INF/services/org.apache.flink.table.factories.Factory"


class OptionError(ValueError):
    """A DDL option that is unknown, missing or of a bad value (the message is the Java one)."""


@dataclass(frozen=True)
class TableOption:
    """One option key of a connector.

    Attributes:
        key: The DDL key.
        kind: One of :data:`KINDS`.
        description: What it does, for the docs.
        required: Whether a DDL must set it.
        default: The value when unset, in DDL form (None: unset means "not configured").
        choices: An ``enum``'s values.
        maps_to: The DataStream option it sets: a field of the service's writer options
            (``writer.max_buffered_records``), of another options value
            (``publisher.max_messages``), or a builder setter (``set_endpoint``).
        minimum: Smallest ``int`` value, smallest ``duration`` in milliseconds, or shortest
            ``string`` in UTF-8 bytes.
        maximum: Largest ``int`` value, largest ``duration`` in milliseconds, or longest
            ``string`` in UTF-8 bytes (a service's limit, refused when the statement is planned
            rather than by the service).
        required_when: ``(key, value)``: required when that option has that value.
        distinct_from: The key of an option whose value this one's must differ from, where
            both are set (two attribute names of one message, say).
        names: A template's sanitizer in :mod:`pyflink_gcp.routing.names` (``pubsub_topic_id``).
    """

    key: str
    kind: str
    description: str
    required: bool = False
    default: str | None = None
    choices: tuple[str, ...] = ()
    maps_to: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    required_when: tuple[str, str] | None = None
    names: str | None = None
    distinct_from: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The option as the Java side reads it."""
        return {
            "key": self.key,
            "kind": self.kind,
            "required": self.required,
            "default": self.default,
            "choices": list(self.choices),
            "maps_to": self.maps_to,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "required_when": list(self.required_when) if self.required_when else None,
            "distinct_from": self.distinct_from,
        }


@dataclass(frozen=True)
class Connector:
    """A SQL connector: its identifier, its Java factory, its adapter and its options.

    Attributes:
        identifier: The DDL's ``'connector' = ...`` value.
        factory_class: The Java ``DynamicTableSinkFactory`` (a subclass of the bridge's
            ``GcpTableSinkFactory`` naming the identifier).
        adapter: ``module:function`` building the DataStream sink from the parsed options
            (see :mod:`pyflink_gcp.table.adapter`).
        options: Its option keys.
        upserts: Whether a table with a ``PRIMARY KEY`` takes a changelog (updates as upserts,
            deletes as deletes); every other table is insert-only, and the Java sink rejects a
            primary key on a connector without it.
        committing: ``(key, ((value, parallelism), ...))``: the option values that make the
            writer an exactly-once one, whose committables the Java sink hands to the bridge's
            committer operator, and the committer's parallelism for each (0: the writer's).
    """

    identifier: str
    factory_class: str
    adapter: str
    options: tuple[TableOption, ...]
    upserts: bool = False
    committing: tuple[str, tuple[tuple[str, int], ...]] | None = None

    def option(self, key: str) -> TableOption:
        for option in self.options:
            if option.key == key:
                return option
        raise KeyError(key)


def resource_files(connectors: Iterable[Connector], non_retriable_marker: str) -> dict[str, str]:
    """The files the bridge build puts into the jar: the option list and the SPI file.

    Args:
        connectors: Every connector, in the order the SPI file lists their factories.
        non_retriable_marker: The line a Python error a restart cannot fix carries
            (:data:`pyflink_gcp.core.errors.NON_RETRIABLE_MARKER`); the Java sink hands it to
            the marker operator.
    """
    connectors = list(connectors)
    module, name = WRITER_FACTORY.split(":")
    committer_module, committer_name = COMMITTER_FACTORY.split(":")
    document = {
        "version": 1,
        "writer_module": module,
        "writer_name": name,
        "committer_module": committer_module,
        "committer_name": committer_name,
        "commit_tag": COMMIT_TAG,
        "non_retriable_marker": non_retriable_marker,
        "time_roots": list(TIME_ROOTS),
        "connectors": {
            c.identifier: {
                "factory": c.factory_class,
                "options": [o.as_json() for o in c.options],
                "upserts": c.upserts,
                "committing": (
                    {"key": c.committing[0], "values": dict(c.committing[1])}
                    if c.committing
                    else None
                ),
            }
            for c in connectors
        },
    }
    services = "".join(f"{c.factory_class}\n" for c in connectors)
    return {
        RESOURCE: json.dumps(document, indent=1, sort_keys=True) + "\n",
        SERVICES: services,
    }
