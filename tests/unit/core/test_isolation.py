"""Isolating rejected records by halving the request that carried them."""

from __future__ import annotations

import pytest

from pyflink_gcp.core.isolation import isolate_rejected


class _Rejected(Exception):
    pass


class _Service:
    """Rejects any request holding a bad record; records what it accepted, in order."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad
        self.accepted: list[int] = []
        self.calls = 0

    def send(self, part) -> None:
        self.calls += 1
        if self.bad & set(part):
            raise _Rejected(f"bad record in {list(part)}")
        self.accepted.extend(part)


def test_only_the_bad_records_come_back_and_the_rest_is_sent_in_order():
    service = _Service({3, 7, 8})
    rejected = isolate_rejected(list(range(16)), service.send, lambda e: isinstance(e, _Rejected))
    assert [item for item, _ in rejected] == [3, 7, 8]
    assert all(isinstance(error, _Rejected) for _, error in rejected)
    assert service.accepted == [i for i in range(16) if i not in {3, 7, 8}]


def test_a_clean_request_costs_one_call():
    service = _Service(set())
    assert isolate_rejected(list(range(1000)), service.send, lambda e: True) == []
    assert service.calls == 1


def test_one_bad_record_costs_a_logarithmic_number_of_calls():
    service = _Service({517})
    isolate_rejected(list(range(1024)), service.send, lambda e: True)
    assert service.calls == 1 + 2 * 10


def test_an_error_that_is_not_the_records_fault_is_raised_unchanged():
    def send(part):
        raise RuntimeError("service down")

    with pytest.raises(RuntimeError, match="service down"):
        isolate_rejected([1, 2, 3], send, lambda e: isinstance(e, _Rejected))
