"""Field selection: drop, keep and only on dicts and Rows, and the builder setter that applies it
between the resolver and the serializer (over the in-memory file sink: no Flink job)."""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict
from types import MappingProxyType

import cloudpickle
import pytest
from pyflink.common.types import Row, RowKind

from pyflink_gcp.core import (
    ConfigurationError,
    FailureHandler,
    RecordRejectedError,
    SerializerError,
    SubtaskInfo,
    UnroutableRecord,
)
from pyflink_gcp.core.fields import FieldSelection, FieldSelectionError, SelectedFields
from pyflink_gcp.core.sink_writer import SinkWriter
from tests.support.fakes import FileDestination, FileSinkBuilder

ORDER = {"id": 7, "tenant": "acme", "amount": 12.5, "payload": {"sku": "a", "n": 2}}


def named_row(**fields):
    """A Row with field names in the given order, as a typed PyFlink stream delivers it."""
    row = Row(*fields.values())
    row._fields = list(fields)
    return row


# -- dicts --------------------------------------------------------------------------------------


def test_drop_removes_the_fields_and_ignores_those_the_record_lacks():
    selected = FieldSelection.drop(["tenant", "missing"]).apply(ORDER)
    assert selected == {"id": 7, "amount": 12.5, "payload": {"sku": "a", "n": 2}}
    assert "tenant" in ORDER  # the record itself is left as it was


def test_keep_writes_only_the_fields_in_the_records_order():
    selected = FieldSelection.keep(["amount", "id", "absent"]).apply(ORDER)
    assert list(selected.items()) == [("id", 7), ("amount", 12.5)]


def test_only_writes_the_value_of_one_record_field():
    assert FieldSelection.only("payload").apply(ORDER) == {"sku": "a", "n": 2}


def test_a_dict_subclass_keeps_its_class_and_another_mapping_becomes_a_dict():
    ordered = FieldSelection.drop(["b"]).apply(OrderedDict(a=1, b=2, c=3))
    assert type(ordered) is OrderedDict and ordered == OrderedDict(a=1, c=3)
    proxy = FieldSelection.keep(["a"]).apply(MappingProxyType({"a": 1, "b": 2}))
    assert type(proxy) is dict and proxy == {"a": 1}


# -- Rows ---------------------------------------------------------------------------------------


def test_drop_and_keep_on_a_row_make_a_named_row_of_the_same_kind():
    row = named_row(id=7, tenant="acme", amount=12.5)
    row.set_row_kind(RowKind.UPDATE_AFTER)
    dropped = FieldSelection.drop(["tenant"]).apply(row)
    assert isinstance(dropped, Row) and dropped.as_dict() == {"id": 7, "amount": 12.5}
    assert dropped.get_row_kind() is RowKind.UPDATE_AFTER
    kept = FieldSelection.keep(["amount", "id"]).apply(row)
    assert kept._fields == ["id", "amount"] and list(kept) == [7, 12.5]
    assert kept["amount"] == 12.5 and kept.amount == 12.5
    assert row.as_dict() == {"id": 7, "tenant": "acme", "amount": 12.5}


def test_only_on_a_row_takes_a_nested_row_or_dict():
    inner = named_row(sku="a", n=2)
    assert FieldSelection.only("item").apply(named_row(id=1, item=inner)) is inner
    assert FieldSelection.only("item").apply(named_row(id=1, item={"sku": "b"})) == {"sku": "b"}


@pytest.mark.parametrize(
    ("selection", "record", "reason"),
    [
        (FieldSelection.only("payload"), {"id": 1}, "the record has no field 'payload'"),
        (
            FieldSelection.only("payload"),
            named_row(id=1),
            "no field 'payload' (its fields: ['id'])",
        ),
        (FieldSelection.only("id"), {"id": 1}, "field 'id' holds int (1), not a record"),
        (FieldSelection.only("tags"), {"tags": ["a"]}, "holds list (['a']), not a record"),
        (FieldSelection.drop(["a"]), Row(1, 2), "a Row without field names"),
        (FieldSelection.keep(["a"]), b"{}", "the record is a bytes, not a dict or a Row"),
        (FieldSelection.only("a"), 42, "the record is a int, not a dict or a Row"),
    ],
)
def test_a_record_the_selection_cannot_apply_to_raises_saying_why(selection, record, reason):
    with pytest.raises(FieldSelectionError) as caught:
        selection.apply(record)
    assert reason in str(caught.value)


# -- the value ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FieldSelection.drop("tenant"), r"takes a list of field names, e.g. .*drop\("),
        (lambda: FieldSelection.keep([]), "needs at least one field name"),
        (lambda: FieldSelection.keep(["a", ""]), "non-empty field names"),
        (lambda: FieldSelection.drop(["a", 1]), "non-empty field names"),
        (lambda: FieldSelection.drop(["a", "b", "a"]), "names 'a' more than once"),
        (lambda: FieldSelection.only(["payload"]), "the name of one field"),
        (lambda: FieldSelection.only(""), "the name of one field"),
    ],
)
def test_malformed_selections_are_refused(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_of_takes_at_most_one_of_the_three_keys():
    assert FieldSelection.of() is None
    assert FieldSelection.of(drop=["a"]) == FieldSelection.drop(["a"])
    assert FieldSelection.of(keep=("a", "b")) == FieldSelection.keep(["a", "b"])
    assert FieldSelection.of(only="p") == FieldSelection.only("p")
    with pytest.raises(ConfigurationError, match="at most one of drop, keep and only.*drop and"):
        FieldSelection.of(drop=["a"], only="p")
    with pytest.raises(ConfigurationError, match="keep and only"):
        FieldSelection.of(keep=["a"], only="p")


def test_a_selection_is_an_immutable_picklable_value():
    selection = FieldSelection.drop(["tenant", "country"])
    assert selection.kind == "drop" and selection.fields == ("tenant", "country")
    assert repr(selection) == "FieldSelection.drop(['tenant', 'country'])"
    assert repr(FieldSelection.only("p")) == "FieldSelection.only('p')"
    assert selection == FieldSelection.drop(("tenant", "country"))
    assert selection != FieldSelection.keep(["tenant", "country"])
    assert len({selection, FieldSelection.drop(["tenant", "country"])}) == 1
    assert pickle.loads(pickle.dumps(selection)) == selection
    with pytest.raises(AttributeError, match="immutable"):
        selection.kind = "keep"  # type: ignore[misc]


def test_columns_names_what_drop_and_keep_write_of_a_list_of_names():
    names = ("id", "tenant", "amount")
    assert FieldSelection.drop(["tenant"]).columns(names) == ("id", "amount")
    assert FieldSelection.keep(["amount", "id"]).columns(names) == ("id", "amount")
    assert FieldSelection.only("payload").columns(names) == ("payload",)


# -- the builder and the sink writer ------------------------------------------------------------


def by_tenant(record, ctx):
    return FileDestination.of(record["tenant"])


def open_sink(tmp_path, selection, serializer=None, handler=None, pickled=False) -> SinkWriter:
    builder = (
        FileSinkBuilder(str(tmp_path))
        .set_destination_resolver(by_tenant)
        .set_serializer(serializer or (lambda r, c: r))
        .set_field_selection(selection)
    )
    if handler is not None:
        builder.set_failure_handler(handler)
    config = builder.build()
    if pickled:  # as shipped to a worker
        config = cloudpickle.loads(cloudpickle.dumps(config))
    config.factory.accepts_unroutable = True  # as every sink of the package does
    writer = SinkWriter(config)
    writer.open(SubtaskInfo("file-sink"))
    return writer


def written(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_the_resolver_sees_the_whole_record_and_the_serializer_the_selected_one(tmp_path):
    seen = []

    def serializer(record, ctx):
        seen.append(dict(record))
        return record

    writer = open_sink(tmp_path, FieldSelection.drop(["tenant"]), serializer)
    writer.write({"tenant": "acme", "id": 1})
    writer.write({"tenant": "globex", "id": 2})
    writer.flush()
    assert written(tmp_path, "acme") == [{"id": 1}]
    assert written(tmp_path, "globex") == [{"id": 2}]
    assert seen == [{"id": 1}, {"id": 2}]


def test_the_selection_applies_to_row_records_too(tmp_path):
    writer = open_sink(tmp_path, FieldSelection.keep(["id"]), _as_dict, pickled=True)
    writer.write(named_row(tenant="acme", id=1, secret="x"))
    writer.flush()
    assert written(tmp_path, "acme") == [{"id": 1}]


def test_a_record_only_cannot_apply_to_goes_to_the_failure_handler(tmp_path):
    writer = open_sink(
        tmp_path, FieldSelection.only("payload"), handler=FailureHandler.log_and_drop()
    )
    writer.write({"tenant": "acme", "payload": {"id": 1}})
    writer.write({"tenant": "acme", "id": 2})
    writer.write({"tenant": "acme", "payload": "text"})
    writer.flush()
    assert written(tmp_path, "acme") == [{"id": 1}]
    assert writer.router.dropped == 2 and writer.records_written == 1


def test_under_fail_job_such_a_record_fails_naming_sink_selection_and_record(tmp_path):
    writer = open_sink(tmp_path, FieldSelection.only("payload"))
    with pytest.raises(RecordRejectedError) as caught:
        writer.write({"tenant": "acme", "id": 2})
    message = str(caught.value)
    assert "sink 'file-sink'" in message and "FieldSelection.only('payload')" in message
    assert "the record has no field 'payload'" in message and "'id': 2" in message


def test_serializer_errors_still_name_the_users_serializer(tmp_path):
    def to_element(record, ctx):
        return record["tenant"]  # dropped: the serializer sees the selected record

    writer = open_sink(tmp_path, FieldSelection.drop(["tenant"]), to_element)
    with pytest.raises(SerializerError, match=r"serializer .*to_element raised KeyError"):
        writer.write({"tenant": "acme", "id": 1})


def test_an_unselectable_record_keeps_its_json_as_the_dead_letter_payload():
    wrapper = SelectedFields(FieldSelection.only("p"), lambda r, c: r)
    failed = wrapper(named_row(tenant="acme", p=3), None)
    assert isinstance(failed, UnroutableRecord)
    assert json.loads(failed.payload) == {"tenant": "acme", "p": 3}
    assert "field 'p' holds int (3), not a record" in failed.reason


def test_the_setter_takes_a_field_selection_only_and_one_kind_per_sink():
    builder = FileSinkBuilder().set_sink_name("orders")
    with pytest.raises(ConfigurationError, match=r"sink 'orders': set_field_selection\(\) takes"):
        builder.set_field_selection(["tenant"])  # type: ignore[arg-type]
    builder.set_field_selection(FieldSelection.drop(["tenant"]))
    builder.set_field_selection(FieldSelection.drop(["tenant"]))  # the same again is harmless
    with pytest.raises(
        ConfigurationError,
        match=r"sink 'orders': .*already given FieldSelection.drop\(\['tenant'\]\); at most one "
        r"of drop, keep and only .*FieldSelection.keep\(\['id'\]\)",
    ):
        builder.set_field_selection(FieldSelection.keep(["id"]))


def test_without_a_selection_the_serializer_is_the_users():
    config = FileSinkBuilder().set_destination_resolver(by_tenant).set_serializer(_same).build()
    assert not isinstance(config.serializer, SelectedFields)


def _as_dict(record, ctx):
    return record.as_dict()


def _same(record, ctx):
    return record
