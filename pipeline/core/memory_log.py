"""InMemoryEventLog: a real, partitioned, append-only log in memory (tests and the offline evaluation)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from pipeline.core.event_log import PositionOutOfRangeError, RawRecord, ReadResult
from pipeline.core.events import CaseRef, LogPosition


def _partition(case: CaseRef, partitions: int) -> int:
    # Deterministic across processes (unlike hash()); Kafka uses murmur2, this log only needs stability.
    return int.from_bytes(hashlib.sha256(case.key.encode()).digest()[:4], "big") % partitions


class InMemoryEventLog:
    """Append-only partitions of raw records; offsets are list indices, never reused."""

    def __init__(self, partitions: int = 6) -> None:
        self._partitions: list[list[RawRecord]] = [[] for _ in range(partitions)]

    def append(self, case: CaseRef, key: bytes, value: bytes) -> LogPosition:
        """Appends a record's bytes to the case's partition (encoding is the caller's: see pipeline.wire)."""
        partition = _partition(case, len(self._partitions))
        position = LogPosition(partition, len(self._partitions[partition]))
        self._partitions[partition].append(RawRecord(position, key, value))
        return position

    def erase(self, position: LogPosition) -> None:
        """Drops a record as compaction of a tombstone would; its offset stays unused."""
        records = self._partitions[position.partition]
        records[position.offset] = RawRecord(position, None, None)

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        del deadline  # memory answers at once
        found: list[RawRecord] = []
        missing: list[LogPosition] = []
        for position in positions:
            if not 0 <= position.partition < len(self._partitions):
                raise PositionOutOfRangeError(f"partition {position.partition} does not exist "
                                              f"({len(self._partitions)} partitions)")  # fmt: skip
            records = self._partitions[position.partition]
            if position.offset >= len(records):
                raise PositionOutOfRangeError(f"offset {position.offset} of partition {position.partition} was never "
                                              f"written (the log ends at {len(records)})")  # fmt: skip
            record = records[position.offset] if position.offset >= 0 else None
            if record is None or record.value is None:
                missing.append(position)
            else:
                found.append(record)
        return ReadResult(tuple(found), tuple(missing))

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        del deadline
        prefix = f"{case.key}/".encode()
        records = self._partitions[_partition(case, len(self._partitions))]
        return ReadResult(tuple(r for r in records if r.value is not None and r.key and r.key.startswith(prefix)))
