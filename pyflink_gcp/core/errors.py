"""Exceptions raised by the sinks. Every message names the sink and, where known, the destination."""

from __future__ import annotations


class SinkError(RuntimeError):
    """Base of every error a pyflink-gcp sink raises on purpose."""


class ConfigurationError(SinkError, ValueError):
    """The sink was built with settings that cannot work (raised at ``build()`` or ``open()``)."""


class ResolverError(SinkError):
    """The destination resolver returned None, a wrong type, or raised."""


class SerializerError(SinkError):
    """The serializer raised or returned a value of the wrong type."""


class DestinationNotFoundError(SinkError):
    """A destination does not exist and the sink may not create it."""


class CreationLimitExceededError(SinkError):
    """The sink would create more destinations than its configured bound allows."""


class WriteError(SinkError):
    """A write failed for a reason that is not the record's fault, after retries."""


class RecordRejectedError(SinkError):
    """A record was rejected for its content and the failure handler is ``fail_job()``."""
