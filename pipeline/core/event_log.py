"""The event-log port: read a case's records by position or by scanning, from Kafka or from memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.core.events import CaseRef, LogPosition


@dataclass(frozen=True)
class RawRecord:
    """A record as stored: its position, key and value bytes (decoding and checks happen later)."""

    position: LogPosition
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ReadResult:
    """Records found, in the order asked for, and the asked-for positions that hold no record any more."""

    records: tuple[RawRecord, ...]
    missing: tuple[LogPosition, ...] = ()


class EventLog(Protocol):
    """Reads trajectories; a Kafka topic in production, a list in memory for tests and offline runs."""

    def read(self, positions: Sequence[LogPosition]) -> ReadResult:
        """The records at exactly these positions; cost proportional to len(positions)."""
        ...

    def scan(self, case: CaseRef) -> ReadResult:
        """Every record of `case`, found by scanning the case's partition."""
        ...
