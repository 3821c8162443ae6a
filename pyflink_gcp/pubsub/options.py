"""Options of the Pub/Sub sink: the writer settings, the batch shape, topic creation.

Three values, because they answer three questions:

- :class:`PubSubWriterOptions`: how the sink's writer buffers, retries and keeps publishers
  (the settings every sink shares, plus ``shutdown_budget``);
- :class:`PubSubPublisherOptions`: what one Publish request looks like (its size, whether it
  carries ordering keys and whether it is compressed), the service-specific part;
- :class:`TopicCreateOptions`: what a topic created under ``CREATE_IF_NEEDED`` gets.

All three are frozen and validated when built, raising
:class:`~pyflink_gcp.core.errors.ConfigurationError` naming the option and the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Self

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import (
    CreatingOptionsBuilder,
    CreatingWriterOptions,
    check_bool,
    check_duration,
    check_int,
)

#: Service limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_MESSAGES_PER_REQUEST = 1_000
MAX_REQUEST_BYTES = 10_000_000
MAX_MESSAGE_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1_024
MAX_ORDERING_KEY_BYTES = 1_024
#: Publish requests of at least this many bytes are compressed when compression is enabled
#: (the threshold of Google's publisher clients).
DEFAULT_COMPRESSION_BYTES_THRESHOLD = 240


@dataclass(frozen=True, kw_only=True)
class PubSubWriterOptions(CreatingWriterOptions):
    """How the Pub/Sub sink's writer buffers, retries and keeps its per-topic publishers.

    The shared settings keep their shared meaning (see
    :class:`~pyflink_gcp.core.options.CreatingWriterOptions`); for Pub/Sub:

    - ``max_in_flight_requests`` (default 4) counts concurrent Publish requests *per topic*;
      with message ordering a topic's requests are chained, so it bounds the chain instead.
    - ``max_active_destinations`` caps open topic publishers per subtask.
    - ``max_created_destinations`` (per ``max_created_destinations_per``) bounds the topics one
      subtask may create.

    Attributes:
        shutdown_budget: How long closing a publisher may wait for its in-flight requests
            before the sink fails (rather than abandoning them).
    """

    shutdown_budget: timedelta = timedelta(seconds=30)

    def _validate(self) -> None:
        super()._validate()
        check_duration(type(self).__name__, "shutdown_budget", self.shutdown_budget)

    @staticmethod
    def builder() -> PubSubWriterOptionsBuilder:
        """A builder starting from the defaults."""
        return PubSubWriterOptionsBuilder()


class PubSubWriterOptionsBuilder(CreatingOptionsBuilder[PubSubWriterOptions]):
    """Builder of :class:`PubSubWriterOptions`: the shared setters plus ``shutdown_budget``."""

    options_type = PubSubWriterOptions

    def shutdown_budget(self, budget: timedelta) -> Self:
        """How long closing a publisher may wait for its requests (default 30 s)."""
        return self._set("shutdown_budget", budget)


@dataclass(frozen=True, kw_only=True)
class PubSubPublisherOptions:
    """The shape of one Publish request: its size, its ordering keys, its compression.

    A topic's batch is sent when it holds ``max_messages`` messages or ``max_bytes`` bytes,
    before each checkpoint barrier, and at the writer operator's other bundle ends (after
    ``max_buffer_time`` or ``max_buffered_records`` of the writer options): at every one
    without checkpoint markers, under markers once the batch is ``max_buffer_time`` old.

    Attributes:
        max_messages: Messages per Publish request (service limit 1,000).
        max_bytes: Bytes per Publish request (service limit 10 MB).
        enable_message_ordering: Send ordering keys; a topic's requests are then sent one at a
            time, in order, so one key's messages arrive in order.
        enable_compression: Compress a Publish request with gzip (gRPC's per-call compression)
            when its serialized size is at least ``compression_bytes_threshold``. Worth it for
            compressible payloads (JSON, text) when the network between the workers and
            Pub/Sub is the bottleneck or is paid for; it costs client CPU per request.
        compression_bytes_threshold: The smallest request, in serialized bytes, that is
            compressed (0: every request). Below a few hundred bytes gzip saves nothing.
    """

    max_messages: int = MAX_MESSAGES_PER_REQUEST
    max_bytes: int = 5_000_000
    enable_message_ordering: bool = False
    enable_compression: bool = False
    compression_bytes_threshold: int = DEFAULT_COMPRESSION_BYTES_THRESHOLD

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "max_messages", self.max_messages, maximum=MAX_MESSAGES_PER_REQUEST)
        check_int(owner, "max_bytes", self.max_bytes, maximum=MAX_REQUEST_BYTES)
        check_bool(owner, "enable_message_ordering", self.enable_message_ordering)
        check_bool(owner, "enable_compression", self.enable_compression)
        check_int(
            owner,
            "compression_bytes_threshold",
            self.compression_bytes_threshold,
            minimum=0,
            maximum=MAX_REQUEST_BYTES,
        )

    @property
    def compression_threshold(self) -> int | None:
        """The size from which requests are compressed, or None when compression is off."""
        return self.compression_bytes_threshold if self.enable_compression else None

    @staticmethod
    def builder() -> PubSubPublisherOptionsBuilder:
        """A builder starting from the defaults."""
        return PubSubPublisherOptionsBuilder()


class PubSubPublisherOptionsBuilder:
    """Builder of :class:`PubSubPublisherOptions`, on the options builders' ``_set`` pattern.

    Not an :class:`~pyflink_gcp.core.options.OptionsBuilder`: the publisher options are no
    writer options, so the shared setters do not belong here.
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> Self:
        self._values[name] = value
        return self

    def max_messages(self, count: int) -> Self:
        """Messages per Publish request (1 to 1,000; default 1,000)."""
        return self._set("max_messages", count)

    def max_bytes(self, size: int) -> Self:
        """Bytes per Publish request (at most 10 MB; default 5 MB)."""
        return self._set("max_bytes", size)

    def enable_message_ordering(self, enabled: bool = True) -> Self:
        """Send ordering keys and a topic's requests one at a time (default off)."""
        return self._set("enable_message_ordering", enabled)

    def enable_compression(self, enabled: bool = True) -> Self:
        """Gzip Publish requests of at least ``compression_bytes_threshold`` bytes (default
        off)."""
        return self._set("enable_compression", enabled)

    def compression_bytes_threshold(self, size: int) -> Self:
        """The smallest request compressed, in serialized bytes (0: all; default 240)."""
        return self._set("compression_bytes_threshold", size)

    def build(self) -> PubSubPublisherOptions:
        """The options value; raises ConfigurationError naming the first bad setting."""
        return PubSubPublisherOptions(**self._values)


@dataclass(frozen=True, kw_only=True)
class TopicCreateOptions:
    """Applied to every topic the sink creates under ``CreateDisposition.CREATE_IF_NEEDED``.

    How many topics a subtask may create is a writer option
    (``PubSubWriterOptions.max_created_destinations``), like every sink's creation bound.

    Attributes:
        labels: Topic labels.
        message_retention_duration: How long the topic retains messages (None: the service
            default).
    """

    labels: dict[str, str] = field(default_factory=dict)
    message_retention_duration: timedelta | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        labels = self.labels
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ConfigurationError(f"{owner}.labels must be a dict of str to str, got {labels!r}")
        if self.message_retention_duration is not None:
            check_duration(owner, "message_retention_duration", self.message_retention_duration)
