"""The event record (dpm.event.v1): one trajectory event, and the case opening its first event may carry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import TaskSpec
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher, open_body, seal_body
from pipeline.wire.validation import SchemaError, validate


@dataclass(frozen=True)
class CaseOpening:
    """What the first event of a case may declare for the per-event baseline: task and budgets."""

    task: TaskSpec
    summ_budgets: tuple[int, ...] = ()


@dataclass(frozen=True)
class EventRecord:
    """An event as stored in the events topic; `opening` rides on the first event of a case only."""

    event: Event
    opening: CaseOpening | None = None

    def to_wire(self) -> dict[str, Any]:
        event = self.event
        value: dict[str, Any] = {
            "schema": SchemaId.EVENT.value,
            "tenant": event.case.tenant,
            "case_id": event.case.case_id,
            "seq": event.seq,
            "kind": event.kind,
            "text": event.text,
        }
        if self.opening is not None:
            value["task"] = self.opening.task.wire()
            if self.opening.summ_budgets:
                value["summ_budgets"] = list(self.opening.summ_budgets)
        return value

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> EventRecord:
        """The record of a decoded value; raises RejectedError(SCHEMA) unless it is a valid dpm.event.v1."""
        try:
            validate(SchemaId.EVENT, value)
        except SchemaError as exc:
            raise RejectedError(Rejection.SCHEMA, str(exc)) from exc
        event = Event(CaseRef(value["tenant"], value["case_id"]), int(value["seq"]), value["kind"], value["text"])
        task = value.get("task")
        opening = None
        if task is not None:
            opening = CaseOpening(TaskSpec.from_wire(task), tuple(int(b) for b in value.get("summ_budgets", ())))
        return cls(event, opening)

    @classmethod
    def decode(cls, data: bytes | None, what: str = "event", cipher: CaseCipher | None = None) -> EventRecord:
        """The record of raw bytes, opened if sealed; raises RejectedError (NOT_JSON, SCHEMA or ERASED)."""
        return cls.from_wire(open_body(decode_object(data, what), cipher))


def opened(events: Iterable[Event], opening: CaseOpening | None) -> list[EventRecord]:
    """Records of a case's events, the opening (if any) on the event with seq 1 only."""
    return [EventRecord(e, opening if e.seq == 1 else None) for e in events]


def sealed_values(events: Iterable[Event], opening: CaseOpening | None, cipher: CaseCipher | None, *,
                  synced: bool = False) -> list[tuple[Event, bytes]]:  # fmt: skip
    """Each event with the bytes a producer writes: validated first (all or nothing), sealed with `cipher`.

    Raises SchemaError before anything is sealed when one event is not a valid dpm.event.v1.
    `synced`: the caller synced the cipher just before (a sequencer does once for a whole transaction).
    """
    records = opened(events, opening)
    values = [r.to_wire() for r in records]
    for value in values:
        validate(SchemaId.EVENT, value)  # nothing is sent unless every event is valid
    if cipher is not None and not synced:
        cipher.sync()  # a case erased since the last append starts again under a new key
    return [(r.event, orjson.dumps(seal_body(v, cipher))) for r, v in zip(records, values, strict=True)]


def append_events(log: InMemoryEventLog, events: Iterable[Event]) -> list[LogPosition]:
    """Appends events to an in-memory log in their wire form, keyed as in Kafka; returns their positions."""
    return [log.append(e.case, e.key.encode(), EventRecord(e).encode()) for e in events]
