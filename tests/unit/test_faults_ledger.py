"""The fault suite's ledger: which ids the destination owes, read from the job's logs."""

from __future__ import annotations

from pathlib import Path

from tests.faults.ledger import LOGS, read_ledger


def write(control: Path, name: str, lines: list[str]) -> None:
    logs = control / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    (logs / name).write_text("".join(f"{line}\n" for line in lines))


def test_a_drop_after_a_rolled_back_handing_excuses_the_id(tmp_path: Path) -> None:
    # Attempt 1 (opened at 100) hands 1..4 on and the writer takes them; a restore rolls it
    # back to before 3; attempt 2 (opened at 200) hands 3 on again, then the finish comes and
    # it drops 4..6.
    write(tmp_path, "map-0-11-100.log", ["1 1000", "2 1001", "3 1002", "4 1003"])
    write(tmp_path, "sink-11-100.log", ["1 1000", "2 1001", "3 1002", "4 1003"])
    write(tmp_path, "map-0-12-200.log", ["3 2000", "d 4 6"])
    write(tmp_path, "sink-12-200.log", ["3 2000"])
    ledger = read_ledger(tmp_path)

    assert ledger.finally_dropped([1, 2, 3, 4, 5, 6, 7]) == {4, 5, 6}
    assert ledger.rolled_back() == {4}
    assert ledger.resent == 1


def test_a_run_cut_short_owes_only_what_its_maps_handed_on(tmp_path: Path) -> None:
    # The job handed 0..3 on (the writer took 0..2), was stopped with a savepoint and never
    # restored: 4..9 never left the source. Had the run finished, the job would have handed or
    # dropped every id, so an id it did neither is owed then.
    write(tmp_path, "map-0-11-100.log", ["0 1000", "1 1001", "2 1002", "3 1003"])
    write(tmp_path, "sink-11-100.log", ["0 1000", "1 1001", "2 1002"])
    ledger = read_ledger(tmp_path)

    assert ledger.owed(10, complete=False) == {0, 1, 2, 3}
    assert ledger.owed(10, complete=True) == set(range(10))


def test_an_id_handed_again_after_an_earlier_drop_is_owed(tmp_path: Path) -> None:
    # The attempt that dropped 5 was itself rolled back; the next one handed 5 on: owed.
    write(tmp_path, "map-0-11-100.log", ["4 1000", "d 5 5"])
    write(tmp_path, "map-0-12-300.log", ["5 3000"])
    ledger = read_ledger(tmp_path)

    assert ledger.finally_dropped([4, 5]) == set()
    assert ledger.rolled_back() == set()


def test_the_soak_owes_an_id_unless_its_last_word_is_a_drop(tmp_path: Path) -> None:
    from tests.soak.__main__ import lost_ids

    # The soak's map logs only its drops. Attempt 1's writer took 1 and 2; a restore rolled
    # 2 back, and attempt 2, after the finish, dropped 2 and 3. Nothing handed on or dropped
    # 0 and 4: they are lost wherever they went, as is 1, taken but not read back.
    write(tmp_path, "sink-11-100.log", ["1 1000", "2 1001"])
    write(tmp_path, "drops-0-12-200.log", ["d 2 3"])
    assert lost_ids(5, set(), read_ledger(tmp_path)) == [0, 1, 4]
    assert lost_ids(5, {1}, read_ledger(tmp_path)) == [0, 4]
