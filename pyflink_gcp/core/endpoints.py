"""Endpoint selection shared by the services: explicit setting, then emulator variable, then ADC.

The emulator variables are ``host:port`` of a plain-text server (an insecure gRPC channel or
plain HTTP) used with anonymous credentials, like the gcloud emulators' own variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a client connects.

    Attributes:
        host: ``host:port`` to connect to, or None for the service's default endpoint.
        insecure: Plain text with anonymous credentials (an emulator).
    """

    host: str | None = None
    insecure: bool = False

    @property
    def is_default(self) -> bool:
        return self.host is None

    @property
    def http_url(self) -> str:
        """The REST base URL of ``host`` (``http://`` when insecure)."""
        assert self.host is not None
        if "://" in self.host:
            return self.host
        return ("http://" if self.insecure else "https://") + self.host


def resolve_endpoint(
    explicit: str | None, env_var: str, *, insecure: bool | None = None
) -> Endpoint:
    """Pick the endpoint of a client.

    Args:
        explicit: The builder's ``set_endpoint`` value, if any. ``host:port`` or a URL.
        env_var: The emulator variable of the service (``PUBSUB_EMULATOR_HOST`` ...).
        insecure: Force plain text for an explicit endpoint (default: only for the variable or
            an ``http://`` URL).

    Resolved on the worker, not at ``build()``, so a job built on one machine and run on another
    uses the environment where it runs.
    """
    if explicit:
        plain = explicit.startswith("http://") if insecure is None else insecure
        host = explicit.split("://", 1)[1] if "://" in explicit else explicit
        return Endpoint(host.rstrip("/"), plain)
    value = os.environ.get(env_var)
    if value:
        host = value.split("://", 1)[1] if "://" in value else value
        return Endpoint(host.rstrip("/"), True)
    return Endpoint(None, False)
