"""What the fault suite adds up and prints: one :class:`Outcome` per target and configuration,
and the table, headed by the machine, the date and the command that reproduces it."""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.inject import KINDS, Fault
from tests.faults.targets import CONFIGS, Config, RestartProbe, Target

SHORT = {
    "tm-kill": "tm",
    "worker-kill": "worker",
    "task-exception": "exc",
    "emulator-pause": "pause",
    "emulator-restart": "restart",
}


@dataclass
class Outcome:
    """What one target's runs (in one configuration) added up to.

    Attributes:
        handed: Distinct records the jobs handed the sink (the emission logs).
        exposed: Records handed to the sink after the last checkpoint completed before a fault
            and before that fault, summed over the faults: what a failover had to deliver again.
        resent: Handings of a record beyond its first (replays the sink absorbed).
        out: Copies of records in the destinations' user-visible state.
        duplicates: ``out`` beyond one copy per record; fails exactly-once and idempotent
            targets.
        replays_seen: Writes the destination recorded beyond one per record (Spanner's audit
            rows, Bigtable's server-timestamped versions), None where it records none: the
            replays an idempotent write hides, reported, never failed.
        command: The command that reproduces this row alone.
    """

    target: Target
    config: Config = CONFIGS["default"]
    command: str = ""
    faults: list[Fault] = field(default_factory=list)
    handed: int = 0
    exposed: int = 0
    resent: int = 0
    out: int = 0
    lost: int = 0
    duplicates: int = 0
    replays_seen: int | None = None
    #: Objects left in FILE_LOADS runs' buckets after the job ended (None: not FILE_LOADS).
    staged_left: int | None = None
    #: One line per run that lost, duplicated (where not allowed), left objects, injected
    #: fewer faults than asked or restarted from no checkpoint.
    run_problems: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    #: TaskManagers that ended by themselves while this target's jobs ran or ended, and
    #: replacements that failed to start: each with its exit code and telling log lines.
    self_ended: list[str] = field(default_factory=list)
    hang: str = "not run"
    hang_ok: bool = True

    @property
    def label(self) -> str:
        return f"{self.target.label} {self.config.name}"

    def problems(self) -> list[str]:
        """Everything that fails the suite for this row."""
        found = [f"{self.label}: {u}" for u in self.unfinished]
        found += [f"{self.label}: {p}" for p in self.run_problems]
        # Long enough for an exit report's telling log lines (see TaskManager.exit_report).
        found += [
            f"{self.label}: a TaskManager ended by itself: {e}"[:2500] for e in self.self_ended
        ]
        if not self.hang_ok:
            found.append(f"{self.label}: unresponsive-emulator check: {self.hang}")
        return found


def abbreviate(ids: list[int], most: int = 20) -> str:
    return ", ".join(map(str, ids[:most])) + (f" ... ({len(ids)})" if len(ids) > most else "")


def reproduce(argv: list[str]) -> str:
    """The command line that runs ``argv`` again (from the repository's root)."""
    return "python -m tests.faults " + " ".join(shlex.quote(a) for a in argv)


def machine_line() -> str:
    """Host, cores, load average, UTC time and commit: what a figure was measured on."""
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except OSError:
        commit, dirty = "?", ""
    return (
        f"{platform.node()}, {os.cpu_count()} cores, load average {load} (1/5/15 min) at the "
        f"end, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit or '?'}"
        f"{' with uncommitted changes' if dirty else ''}"
    )


def table(outcomes: list[Outcome], probes: dict[str, RestartProbe], command: str) -> str:
    """The suite's figures as a Markdown table, headed by the command that reproduces them
    and the machine, and followed by each row's own command."""
    lines = [
        f"`{command}` on {machine_line()}",
        "",
        "| target | guarantee | faults (by kind) | handed | exposed | re-sent | out | lost "
        "| duplicates | replays seen | staged left | recovery s (median / max) "
        "| unresponsive emulator |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for o in outcomes:
        kinds = Counter(f.kind for f in o.faults)
        by_kind = ", ".join(f"{SHORT[k]} {kinds[k]}" for k in KINDS if kinds[k])
        times = [f.recovery_s for f in o.faults if f.recovery_s is not None]
        recovery = f"{statistics.median(times):.1f} / {max(times):.1f}" if times else "-"
        ended = f" (+{len(o.self_ended)} TaskManager ended by itself)" if o.self_ended else ""
        left = "-" if o.staged_left is None else str(o.staged_left)
        seen = "-" if o.replays_seen is None else str(o.replays_seen)
        lines.append(
            f"| {o.label} | {o.target.guarantee} "
            f"| {len(o.faults)}: {by_kind or '-'}{ended} | {o.handed} | {o.exposed} "
            f"| {o.resent} | {o.out} | {o.lost} | {o.duplicates} | {seen} | {left} "
            f"| {recovery} | {o.hang} |"
        )
    lines.append("")
    lines.append("Each row alone (the same faults: each row's seed is its own):")
    lines += [f"- {o.label}: `{o.command}`" for o in outcomes]
    if probes:
        lines.append("")
        lines.append("Emulator restart (data kept across a restart?):")
        for probe in probes.values():
            verdict = (
                "kept (a sink gets the restart fault only if all its emulators keep their data)"
                if probe.survives
                else "restart fault skipped for its sinks"
            )
            lines.append(f"- {probe.service}: {probe.detail} ({probe.seconds:.1f} s); {verdict}")
    return "\n".join(lines)
