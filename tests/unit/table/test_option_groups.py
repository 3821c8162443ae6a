"""The shared option groups: a setting has one key, description and kind in every connector that
has it, and each group's parameters change only what they name."""

from __future__ import annotations

from collections import defaultdict

from pyflink_gcp.table.option_groups import (
    NAME_SANITIZE,
    field_selection_options,
    writer_options,
)
from pyflink_gcp.table.options import CONNECTORS


def test_a_key_shared_by_connectors_has_one_description_and_kind() -> None:
    seen: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for connector in CONNECTORS.values():
        for option in connector.options:
            seen[option.key].add((option.kind, option.description))
    shared = {key for key, forms in seen.items() if len(forms) > 1}
    # Only the options a connector declares on its own may differ (its "table", "project").
    assert not shared & {o.key for o in writer_options(creates=True)}, shared
    assert not shared & {o.key for o in field_selection_options()}, shared
    assert NAME_SANITIZE.key not in shared


def test_every_connector_names_destinations_with_the_one_sanitize_option() -> None:
    for connector in CONNECTORS.values():
        assert NAME_SANITIZE in connector.options, connector.identifier


def test_the_writer_group_parameters_change_only_what_they_name() -> None:
    default = {o.key: o for o in writer_options(creates=True)}
    cheaper = {o.key: o for o in writer_options(creates=True, max_rows="50000", in_flight="8")}
    assert default.keys() == cheaper.keys()
    changed = {k for k in default if default[k] != cheaper[k]}
    assert changed == {"sink.buffer-flush.max-rows", "sink.max-in-flight-requests"}
    assert cheaper["sink.buffer-flush.max-rows"].default == "50000"
    one_database = {o.key for o in writer_options(creates=False, per_destination=False)}
    assert "sink.idle-timeout" not in one_database
    assert "sink.max-active-destinations" not in one_database
    assert not {k for k in one_database if "create" in k}
    assert {k for k in default if "create" in k}
