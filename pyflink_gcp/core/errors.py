"""Exceptions raised by the sinks. Every message names the sink and, where known, the destination.

Two kinds matter to a job under a restart strategy. A :class:`NonRetriableSinkError` (a
configuration or contract error: a resolver returning None, a serializer raising, a destination
missing under ``CREATE_NEVER``, a creation bound reached, a schema that cannot work) comes back
the same on every replay, so restarting only repeats the failure, and its side effects, forever.
The writer operator marks such an error as it leaves the Python worker
(:func:`mark_non_retriable`), and the Java bridge's operator turns a marked failure into Flink's
``SuppressRestartsException``: the job fails once, with the error's own message. Every other
error (transport failures past their retry deadline, a record rejected under ``fail_job()``)
keeps Flink's restart strategy: a restart from the last checkpoint may fix it.
"""

from __future__ import annotations

#: The line a non-retriable error carries out of the Python worker, as a note on the exception
#: (so it is part of the traceback Flink receives but not of the error's message). The Java
#: bridge's operators look for exactly this text in the failure and then suppress restarts.
NON_RETRIABLE_MARKER = "pyflink-gcp: non-retriable error, the job ends without restarts"


class SinkError(RuntimeError):
    """Base of every error a pyflink-gcp sink raises on purpose."""


class NonRetriableSinkError(SinkError):
    """An error a restart cannot fix: the same input and configuration fail the same way.

    The writer operator ends the job on it without Flink's restart loop where the Java bridge's
    operator runs the writer (see :func:`mark_non_retriable`).
    """


class ConfigurationError(NonRetriableSinkError, ValueError):
    """The sink was built with settings that cannot work (raised at ``build()`` or ``open()``)."""


class ResolverError(NonRetriableSinkError):
    """The destination resolver returned None, a wrong type, or raised."""


class SerializerError(NonRetriableSinkError):
    """The serializer raised or returned a value of the wrong type."""


class DestinationNotFoundError(NonRetriableSinkError):
    """A destination does not exist and the sink may not create it."""


class CreationLimitExceededError(NonRetriableSinkError):
    """The sink would create more destinations than its configured bound allows."""


class WriteError(SinkError):
    """A write failed for a reason that is not the record's fault, after retries."""


class RecordRejectedError(SinkError):
    """A record was rejected for its content and the failure handler is ``fail_job()``."""


class RecordSchemaError(RecordRejectedError, NonRetriableSinkError):
    """A record does not fit its destination's schema in a way the sink is set to end the job
    for, whatever its failure handler (BigQuery's ``UnknownFields.FAIL``). Non-retriable: a
    restart replays the same record into the same schema."""


def is_non_retriable(exc: BaseException) -> bool:
    """Whether ``exc`` itself is an error a restart cannot fix.

    Only the error's own class decides, not its causes: an error that wraps a non-retriable
    one on purpose (a write that failed after retries, say) chose to be retried.
    """
    return isinstance(exc, NonRetriableSinkError)


def mark_non_retriable(exc: BaseException) -> bool:
    """Attach :data:`NON_RETRIABLE_MARKER` to ``exc`` when it is non-retriable.

    The writer operator calls this on every error leaving it, just before it propagates. The
    marker is a note (PEP 678), printed after the message in the traceback that crosses to the
    JVM, so the error's message stays what it was. Marking at the operator's edge, rather than
    where an error is made, keeps a non-retriable error that another error merely wraps (as its
    cause or context, also printed in the traceback) from marking the outer one.

    Returns:
        Whether ``exc`` is non-retriable (and now marked).
    """
    if not is_non_retriable(exc):
        return False
    if NON_RETRIABLE_MARKER not in getattr(exc, "__notes__", ()):
        exc.add_note(NON_RETRIABLE_MARKER)
    return True
