"""What a handler gives the transactional loop for one input record: outputs, or deferred work that makes them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pipeline.core.event_log import RawRecord
from pipeline.wire.rejection import Rejection


@dataclass(frozen=True)
class Output:
    """One record to publish inside the transaction."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None  # None: the producer's partitioner chooses from the key

    def size(self) -> int:
        """Bytes this record takes against the record size limit (key, value and headers)."""
        return len(self.key or b"") + len(self.value) + sum(len(n) + len(v) for n, v in self.headers)


# librdkafka refuses a record over message.max.bytes (1,000,000 unless the client config says
# otherwise); the record's own framing takes a little more than its key, value and headers.
DEFAULT_MAX_RECORD_BYTES = 1_000_000
_RECORD_OVERHEAD_BYTES = 512


def max_record_bytes(client_config: dict[str, str]) -> int:
    """The largest record the client sends: its message.max.bytes."""
    return int(client_config.get("message.max.bytes", DEFAULT_MAX_RECORD_BYTES))


def oversized(outputs: Sequence[Output], max_bytes: int) -> Output | None:
    """The first of `outputs` too large to send as a record of at most `max_bytes`, framing included."""
    return next((o for o in outputs if o.size() > max_bytes - _RECORD_OVERHEAD_BYTES), None)


_Result = TypeVar("_Result")


@dataclass(frozen=True)
class Deferred(Generic[_Result]):
    """A record's slow part (model calls), which may run on another thread, and what turns its result into outputs.

    `slow` must not touch the consumer, the producer or anything else the loop's thread uses;
    `finish` runs back on the loop's thread, in input order.
    """

    slow: Callable[[], _Result]
    finish: Callable[[_Result], Sequence[Output]]
    # Called instead of `finish` when the batch is consumed again (another record's failure, say).
    abandon: Callable[[], None] = lambda: None

    def run_inline(self) -> Sequence[Output]:
        return self.finish(self.slow())


Step = Sequence[Output] | Deferred[Any]


def run_inline(step: Step) -> Sequence[Output]:
    """The outputs of `step`, its slow part run on this thread."""
    return step.run_inline() if isinstance(step, Deferred) else step


class Handler(Protocol):
    """Turns one input record into outputs; bad input becomes a dead letter, never an exception."""

    def start(self, record: RawRecord) -> Step:
        """Outputs for `record`, or the deferred work that makes them (called in input order on the loop's thread).

        Raises ModelBackendError, KafkaAdapterError or KeyServiceUnavailableError only for a failure
        worth retrying; so may a Deferred's `slow` part and its `finish`.
        """
        ...

    def dead_letter(self, record: RawRecord, reason: Rejection, detail: str) -> Output:
        """The dead letter of a record the loop gives up on (its model kept failing, its outputs were refused)."""
        ...

    def committed(self, records: Sequence[RawRecord]) -> None:
        """Called once the outputs of `records` are committed (metrics count committed work only)."""
        ...
