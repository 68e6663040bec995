"""Trajectory events, their log positions and the per-case trajectory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.errors import DpmError

# Tenants and cases are path segments of the Kafka key `tenant/case/seq`.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
SEQ_WIDTH = 8


class InvalidEventError(DpmError):
    """An event or trajectory breaks the log's invariants."""


def check_identifier(value: str, what: str) -> str:
    """Returns `value` if it can be a key segment (letters, digits, `._:-`), else raises."""
    if not _ID.fullmatch(value):
        raise InvalidEventError(f"{what} {value!r} must match {_ID.pattern}")
    return value


@dataclass(frozen=True, order=True)
class LogPosition:
    """Where a record sits in a Kafka topic."""

    partition: int
    offset: int


@dataclass(frozen=True)
class CaseRef:
    """A tenant's case: the unit of ordering and isolation."""

    tenant: str
    case_id: str

    def __post_init__(self) -> None:
        check_identifier(self.tenant, "tenant")
        check_identifier(self.case_id, "case id")

    @property
    def key(self) -> str:
        """The trigger key and the partitioning key of the case's events."""
        return f"{self.tenant}/{self.case_id}"


@dataclass(frozen=True)
class Event:
    """One immutable trajectory event: a document chunk, tool output, message or inference."""

    case: CaseRef
    seq: int
    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.seq < 1:
            raise InvalidEventError(f"seq must be >= 1 (events are numbered 1..N), got {self.seq}")
        if not self.kind:
            raise InvalidEventError("event kind must not be empty")

    @property
    def key(self) -> str:
        """Kafka key `tenant/case/seq`, seq zero-padded so keys sort in log order."""
        return f"{self.case.key}/{self.seq:0{SEQ_WIDTH}d}"


@dataclass(frozen=True)
class Trajectory:
    """A case's events in sequence order; index i (1-based) is how prompts and citations name them.

    Invariants: every event belongs to `case`, sequence numbers are strictly consecutive.
    """

    case: CaseRef
    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        for event in self.events:
            if event.case != self.case:
                raise InvalidEventError(f"event {event.key} does not belong to case {self.case.key}")
        for before, after in zip(self.events, self.events[1:], strict=False):
            if after.seq != before.seq + 1:
                raise InvalidEventError(
                    f"case {self.case.key}: sequence gap or disorder between seq {before.seq} and {after.seq}"
                )

    def __len__(self) -> int:
        return len(self.events)

    @property
    def char_length(self) -> int:
        """Total characters of event text: the numerator of the compression ratio."""
        return sum(len(e.text) for e in self.events)

    def by_index(self, index: int) -> Event:
        """The event a prompt numbers `[index]` (1-based)."""
        if not 1 <= index <= len(self.events):
            raise IndexError(index)
        return self.events[index - 1]

    def has_index(self, index: int) -> bool:
        return 1 <= index <= len(self.events)
