"""Turns raw event records into a case's trajectory, refusing anything that breaks isolation or order."""

from __future__ import annotations

from pipeline.core.event_log import ReadResult
from pipeline.core.events import CaseRef, Event, InvalidEventError, LogPosition, Trajectory
from pipeline.wire.event import EventRecord
from pipeline.wire.limits import MAX_TRAJECTORY_CHARS
from pipeline.wire.record_keys import check_event_key
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.sealing import CaseCipher


def assemble(
    case: CaseRef,
    read: ReadResult,
    expected_count: int | None,
    max_chars: int = MAX_TRAJECTORY_CHARS,
    cipher: CaseCipher | None = None,
) -> tuple[Trajectory, tuple[LogPosition, ...]]:
    """The case's trajectory (seq 1..n, gap-free) and the positions it was read from, in seq order.

    Raises RejectedError: ERASED when the case's data key is destroyed (asked-for positions that hold
    nothing any more, or sealed events that no longer open with `cipher`); SUPERSEDED when
    asked-for positions hold nothing though the case was not erased (compaction removed a record
    that a later one with its key replaced); KEY_MISMATCH when a record's key is not
    its own event's; CROSS_TENANT when a record belongs to another tenant or case (isolation);
    SEQUENCE_GAP for gaps, duplicates or a count other than expected; UNKNOWN_CASE when there are
    no events; OVERSIZE past max_chars.
    """
    if read.missing:
        where = f"{len(read.missing)} position(s) hold no record any more, e.g. {read.missing[0]}"
        if cipher is not None and cipher.erased(case):
            raise RejectedError(Rejection.ERASED, f"{where}: case {case.key} is erased")
        raise RejectedError(Rejection.SUPERSEDED, f"{where}: a later record with the same key replaced it")
    if not read.records:
        raise RejectedError(Rejection.UNKNOWN_CASE, f"no events found for case {case.key}")
    events: list[tuple[Event, LogPosition]] = []
    for record in read.records:
        event = EventRecord.decode(record.value, f"event at {record.position}", cipher).event
        check_event_key(record.key, event)
        if event.case != case:
            raise RejectedError(
                Rejection.CROSS_TENANT,
                f"position {record.position} holds an event of {event.case.key}, not of {case.key}",
            )
        events.append((event, record.position))
    # A re-sent event has the same key as its twin; the later record replaces it, as compaction would.
    latest = {e.seq: (e, p) for e, p in sorted(events, key=lambda pair: pair[1])}
    events = [latest[seq] for seq in sorted(latest)]
    seqs = [e.seq for e, _ in events]
    if seqs != list(range(1, len(seqs) + 1)):
        raise RejectedError(Rejection.SEQUENCE_GAP, f"case {case.key}: sequence {seqs[:5]}... is not 1..{len(seqs)}")
    if expected_count is not None and expected_count != len(seqs):
        raise RejectedError(
            Rejection.SEQUENCE_GAP, f"case {case.key}: {len(seqs)} events read, trigger covers {expected_count}"
        )
    chars = sum(len(e.text) for e, _ in events)
    if chars > max_chars:
        raise RejectedError(Rejection.OVERSIZE, f"case {case.key}: {chars} characters exceed the limit of {max_chars}")
    try:
        trajectory = Trajectory(case, tuple(e for e, _ in events))
    except InvalidEventError as exc:
        raise RejectedError(Rejection.SEQUENCE_GAP, str(exc)) from exc
    return trajectory, tuple(p for _, p in events)
