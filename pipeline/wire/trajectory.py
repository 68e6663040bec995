"""Turns raw event records into a case's trajectory, refusing anything that breaks isolation or order."""

from __future__ import annotations

from pipeline.core.event_log import RawRecord, ReadResult
from pipeline.core.events import CaseRef, Event, InvalidEventError, LogPosition, Trajectory
from pipeline.wire.event import EventRecord
from pipeline.wire.limits import MAX_TRAJECTORY_CHARS
from pipeline.wire.record_keys import check_record_key, check_tenant_of_topic, claimed_event
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.sealing import CaseCipher, open_body


def own_records(case: CaseRef, read: ReadResult) -> tuple[ReadResult, tuple[RawRecord, ...]]:
    """A scan's records split into the case's own (key and clear fields name the same event of it) and the rest.

    A scan finds records by key; one whose value names another event (forged, or written by a
    faulty producer) is not the case's, and must not stop the case from being decided: it is left
    out, for the caller to report, and the baseline dead-letters it when it folds the events topic.
    """
    own: list[RawRecord] = []
    others: list[RawRecord] = []
    for record in read.records:
        try:
            claimed = claimed_event(decode_object(record.value, "event"))
        except RejectedError:
            claimed = None
        mine = claimed is not None and claimed[0] == case and record.key == claimed[1].encode()
        (own if mine else others).append(record)
    return ReadResult(tuple(own), read.missing), tuple(others)


def case_event(record: RawRecord, case: CaseRef, cipher: CaseCipher | None, topic_tenant: str | None = None) -> Event:
    """The record's event, its clear fields checked against the topic, its key and the case before it is opened.

    Opening first would look the named case's key up: a record naming another tenant's case would
    have a worker open that tenant's key topic on the writer's say-so.
    """
    body = decode_object(record.value, f"event at {record.position}")
    claimed = claimed_event(body)
    if claimed is not None:
        check_tenant_of_topic(topic_tenant, claimed[0])
        _check_belongs(record, *claimed, case)
    event = EventRecord.from_wire(open_body(body, cipher)).event
    _check_belongs(record, event.case, event.key, case)
    return event


def _check_belongs(record: RawRecord, named: CaseRef, event_key: str, case: CaseRef) -> None:
    """KEY_MISMATCH unless the record is keyed as the event it holds; CROSS_TENANT unless that event is `case`'s."""
    check_record_key(record.key, event_key)
    if named != case:
        raise RejectedError(Rejection.CROSS_TENANT,
                            f"position {record.position} holds an event of {named.key}, not of {case.key}")  # fmt: skip


def assemble(
    case: CaseRef,
    read: ReadResult,
    expected_count: int | None,
    max_chars: int = MAX_TRAJECTORY_CHARS,
    cipher: CaseCipher | None = None,
    *,
    topic_tenant: str | None = None,
) -> tuple[Trajectory, tuple[LogPosition, ...]]:
    """The case's trajectory (seq 1..n, gap-free) and the positions it was read from, in seq order.

    Raises RejectedError: ERASED when the case's data key is destroyed (asked-for positions that hold
    nothing any more, or sealed events that no longer open with `cipher`); SUPERSEDED when
    asked-for positions hold nothing though the case was not erased (compaction removed a record
    that a later one with its key replaced); KEY_MISMATCH when a record's key is not
    its own event's; CROSS_TENANT when a record belongs to another tenant or case (isolation);
    TENANT_MISMATCH when, read from `topic_tenant`'s own topic, a record names another tenant;
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
    events = [(case_event(record, case, cipher, topic_tenant), record.position) for record in read.records]
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
