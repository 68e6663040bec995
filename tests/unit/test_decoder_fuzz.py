"""Property-based fuzzing of every decoder: any bytes give a typed record or a refusal, never a crash."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.task import Architecture, TaskSpec
from pipeline.wire.audit import AuditRecord
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.event import CaseOpening, EventRecord
from pipeline.wire.rejection import RejectedError
from pipeline.wire.trigger import DecisionRequest
from pipeline.wire.view import ViewRecord

TASK = TaskSpec("loan", "Decide.", ("APPROVE", "DENY"))
TRIGGER = DecisionRequest("t", CaseRef("a", "c"), TASK, 900, (Architecture.DPM,), (LogPosition(0, 3),), 1).to_wire()
EVENT = EventRecord(Event(CaseRef("a", "c"), 1, "doc", "text"), CaseOpening(TASK, (900,))).to_wire()

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=25,
)


def _refused_or_read(decode: Callable[[bytes], object], data: bytes) -> None:
    with contextlib.suppress(RejectedError):
        decode(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000))
def test_any_bytes_are_a_trigger_an_event_or_a_refusal(data: bytes) -> None:
    _refused_or_read(DecisionRequest.decode, data)
    _refused_or_read(EventRecord.decode, data)


def _mutated(valid: Mapping[str, Any], changes: dict[str, Any]) -> bytes:
    # The standard library writes any integer; orjson stops at 64 bits.
    return json.dumps({**valid, **changes}, allow_nan=False).encode()


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from([*sorted(TRIGGER), "positions", "events_count", "label", "extra"]), JSON,
                       max_size=4))  # fmt: skip
def test_trigger_shaped_values_decode_or_are_refused(changes: dict[str, Any]) -> None:
    _refused_or_read(DecisionRequest.decode, _mutated(TRIGGER, changes))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from([*sorted(EVENT), "extra"]), JSON, max_size=4))
def test_event_shaped_values_decode_or_are_refused(changes: dict[str, Any]) -> None:
    _refused_or_read(EventRecord.decode, _mutated(EVENT, changes))


READERS: tuple[Callable[[Mapping[str, Any]], object], ...] = (
    DecisionRecord.from_wire, ViewRecord.from_wire, AuditRecord.from_wire, DeadLetterRecord.from_wire,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=20), JSON, max_size=8))
def test_output_readers_refuse_what_they_cannot_read_with_the_errors_readers_catch(value: dict[str, Any]) -> None:
    for read in READERS:
        # pipeline.services.read_outputs counts these as unreadable and reads on
        with contextlib.suppress(DpmError, KeyError, TypeError, ValueError):
            read(orjson.loads(orjson.dumps(value)))
