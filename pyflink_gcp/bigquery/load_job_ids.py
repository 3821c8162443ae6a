"""The ids of ``WriteMethod.FILE_LOADS``' load jobs: a function of what a job loads, nothing else.

BigQuery keeps the first job of an id and answers 409 to a second insert of it, so a commit
that derives the id from the work alone finds, when it is repeated after a failover, the job
it started before instead of loading the files again. The id of a group of files is therefore
a function of the sink name, the table id, the files' URIs (as a set: their order does not
count) and ``BigQueryFileLoadsOptions.job_id_generation``; never of a checkpoint, a subtask or
a clock.

A load job that failed appended nothing (load jobs are atomic), so the same files may load
again, under the next id of an unbounded sequence: ``X``, ``X_retry1``, ``X_retry2``, ...
(:func:`attempt_job_id`). A commit walks it from the start and stops at the first id that
succeeded, is still running, or is unknown (which it inserts).

BigQuery allows 1,024 characters of letters, digits, ``_`` and ``-``. The id is a readable
prefix (sink and table, cut short when long) and the full SHA-256 of everything it is derived
from, so two groups never share an id however long their table ids are.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable

#: BigQuery's limit on the characters of a job id.
MAX_JOB_ID_CHARS = 1_024
#: Characters kept free after the base id for ``_retry<n>``.
_RETRY_ROOM = 24
#: Characters of the digest (SHA-256, hex).
_DIGEST_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def safe_name(name: str) -> str:
    """``name`` with every run of characters a job id (or a file name) may not hold as ``_``."""
    return _UNSAFE.sub("_", name)


def load_job_id(sink: str, table_id: str, uris: Iterable[str], generation: int) -> str:
    """The first id of the job sequence loading the files ``uris`` into ``table_id``.

    Args:
        sink: The sink's name.
        table_id: ``project.dataset.table``.
        uris: The staged files' URIs, in any order.
        generation: ``BigQueryFileLoadsOptions.job_id_generation``: a new generation gives
            the same files ids no earlier job holds.

    Returns:
        ``pyflink_gcp_<sink>_<table>[_g<generation>]_<sha256>``, the readable part cut short so
        that the id with its longest retry suffix stays within :data:`MAX_JOB_ID_CHARS`.
    """
    key = json.dumps([sink, table_id, generation, sorted(uris)], separators=(",", ":"))
    digest = hashlib.sha256(key.encode()).hexdigest()
    readable = safe_name(
        f"pyflink_gcp_{sink}_{table_id}" + (f"_g{generation}" if generation else "")
    )
    room = MAX_JOB_ID_CHARS - _RETRY_ROOM - _DIGEST_CHARS - 1
    return f"{readable[:room]}_{digest}"


def attempt_job_id(base: str, attempt: int) -> str:
    """The id of attempt ``attempt`` (0 first) of the job sequence starting at ``base``."""
    return base if attempt == 0 else f"{base}_retry{attempt}"
