"""The event-log port: read a case's records by position or by scanning, from Kafka or from memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, LogPosition


class ReadDeadlineError(DpmError):
    """Reading a case took longer than the trigger's deadline allows (the read is abandoned)."""


class PositionOutOfRangeError(DpmError):
    """A position names a partition the log does not have, or an offset past the log's end."""


RecordId = tuple[str | None, LogPosition]  # topic (None: the only one read) and position


@dataclass(frozen=True)
class RawRecord:
    """A record as stored: its position, key and value bytes (decoding and checks happen later)."""

    position: LogPosition
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    topic: str | None = None  # where it was read, when the reader spans several topics (a tenant's own)

    @property
    def where(self) -> RecordId:
        """The record's identity across the topics a consumer reads: topic and position."""
        return self.topic, self.position


@dataclass(frozen=True)
class ReadResult:
    """Records found, in the order asked for, and the asked-for positions that hold no record any more."""

    records: tuple[RawRecord, ...]
    missing: tuple[LogPosition, ...] = ()


class EventLog(Protocol):
    """Reads trajectories; a Kafka topic in production, a list in memory for tests and offline runs."""

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        """The records at exactly these positions; cost proportional to len(positions).

        Raises PositionOutOfRangeError for a partition the log lacks, and ReadDeadlineError once
        `time.monotonic()` passes `deadline`.
        """
        ...

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        """Every record of `case`, found by scanning the case's partition (ReadDeadlineError as for read)."""
        ...
