"""Staged objects of a failed attempt that no committable names: found and deleted.

A FILE_LOADS writer uploads a file as soon as it is finished, before the checkpoint's marker
names it in a committable. When the attempt fails before that marker, the object stays in the
staging location, named by nothing: its rows are replayed into new files by the next attempt.
Left alone, such objects pile up with every failover.

Every object name carries the sink, the writer subtask and the execution attempt that staged
it (``<part prefix>-<sink>-<subtask>-<attempt>-<uuid>``). A failover restarts every task of the
job together (the committer reads every writer), so all tasks of one attempt share its number:
an object of an attempt below the committer's own was staged by a failed attempt. The committer
deletes those that nothing it holds names, once nothing from the failed attempt can still
arrive: a committable the barrier overtook under unaligned checkpoints comes back from the
channel state, before anything the new attempt's writers emit, so the sweep runs when every
writer has started in the new attempt
(:meth:`~pyflink_gcp.core.commit.Committer.writers_started`), or at the final commit,
whichever comes first. It runs once per attempt.

A job started anew from a savepoint starts again at attempt 0, so objects an earlier job left
are not swept: a lifecycle rule on the staging prefix removes those.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from pyflink_gcp.bigquery.staging import Staging

_LOG = logging.getLogger("pyflink_gcp.bigquery")


class OrphanSweep:
    """When to sweep, and the sweep, for one committer (its attempt, the sink's names)."""

    def __init__(self, sink_name: str, part_prefix: str, attempt: int) -> None:
        self._attempt = attempt
        self._name = re.compile(
            rf"(?:^|/){re.escape(part_prefix)}-{re.escape(sink_name)}-\d+-(\d+)-[0-9a-f]{{32}}\."
        )
        self.done = attempt == 0  # a first attempt has nothing before it
        #: Objects deleted by the sweep (tests, logs).
        self.deleted: list[str] = []

    def sweep(self, staging: Staging, live_uris: Iterable[str]) -> None:
        """Delete this sink's objects of earlier attempts that ``live_uris`` does not name."""
        self.done = True
        live = set(live_uris)
        for name in staging.list():
            match = self._name.search(name)
            if match is None or int(match.group(1)) >= self._attempt:
                continue
            uri = staging.uri(name)
            if uri in live:
                continue
            staging.delete_uri(uri)
            self.deleted.append(uri)
        if self.deleted:
            _LOG.info(
                "%d staged objects of failed attempts, named by no committable, deleted: %s",
                len(self.deleted),
                ", ".join(self.deleted[:3]) + (" ..." if len(self.deleted) > 3 else ""),
            )
