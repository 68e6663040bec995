"""Trajectory events, their log positions and the per-case trajectory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.errors import DpmError

# Tenants and cases are path segments of the Kafka key `tenant/case/seq`.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
_ID = re.compile(ID_PATTERN)
ID_RULE = "1 to 200 letters, digits or ._:- starting with a letter or digit"
SEQ_WIDTH = 8
# An event's kind is a label (no control character: logs and tools print it on one line); its text
# holds no NUL, which text stores and tools downstream (C strings, PostgreSQL) do not take.
MAX_KIND_CHARS, MAX_TEXT_CHARS = 100, 1_000_000
KIND_PATTERN = r"^[^\u0000-\u001f\u007f]+$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
KIND_RULE = f"1 to {MAX_KIND_CHARS} characters, none of them a control character (U+0000-U+001F, U+007F)"
TEXT_RULE = f"at most {MAX_TEXT_CHARS:,} characters, none of them NUL (U+0000)"


class InvalidEventError(DpmError):
    """An event or trajectory breaks the log's invariants."""


def check_identifier(value: str, what: str) -> str:
    """Returns `value` if it can be a key segment (letters, digits, `._:-`), else raises.

    The error names `what` and the rule, never the value: it may be anything a caller sent.
    """
    if not _ID.fullmatch(value):
        raise InvalidEventError(f"{what} must be {ID_RULE}")
    return value


def check_kind(kind: str) -> str:
    """Returns `kind` if it is an event's kind (a label of 1 to 100 characters, no control character), else raises."""
    if not 1 <= len(kind) <= MAX_KIND_CHARS or _CONTROL.search(kind):
        raise InvalidEventError(f"an event's kind must be {KIND_RULE}")
    return kind


def check_text(text: str) -> str:
    """Returns `text` if it can be an event's text (at most 1,000,000 characters, no NUL), else raises."""
    if len(text) > MAX_TEXT_CHARS or "\x00" in text:
        raise InvalidEventError(f"an event's text must be {TEXT_RULE}")
    return text


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
        check_kind(self.kind)  # the text's rule is the wire's (check_text): a case file's text may exceed a record

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
