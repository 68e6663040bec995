"""The baseline's stored state: handled triggers (duplicates refused), case state, the published ledger."""

from __future__ import annotations

from pipeline.core.events import LogPosition
from pipeline.core.task import TaskSpec
from pipeline.wire.ledger import MAX_RANGES, PublishedLedger
from pipeline.workers.baseline.state import CaseState, HandledTriggers


def test_handled_triggers_tell_a_duplicate_and_keep_refusals() -> None:
    first, resent = LogPosition(0, 4), LogPosition(0, 9)
    handled = HandledTriggers().add("t1", first, refused=False, keep=64)
    assert handled.decided("t1")
    handled = handled.add("t1", resent, refused=True, keep=64)
    assert handled.decided("t1")
    assert not HandledTriggers().add("t2", resent, refused=True, keep=64).decided("t2")  # a refusal decides nothing
    assert HandledTriggers.from_json(handled.to_json()) == handled
    assert HandledTriggers.from_json([["old", [1, 2]]]).decided("old")  # entries stored before refusals were kept
    assert len(handled.add("t2", LogPosition(1, 0), refused=False, keep=2).entries) == 2


def test_case_state_keeps_rewritten_events_and_reads_what_was_stored_before_them() -> None:
    state = CaseState(TaskSpec("loan", "Decide.", ("APPROVE", "DENY")), (900,), last_seq=5)
    assert CaseState.from_json(state.to_json()) == state
    assert "rewritten" not in state.to_json()  # stored as before while no event was rewritten
    rewritten = state.with_rewritten(3).with_rewritten(2).with_rewritten(3)
    assert rewritten.rewritten == (2, 3)
    assert CaseState.from_json(rewritten.to_json()) == rewritten


def test_the_ledger_merges_offsets_into_ranges_and_keeps_the_newest() -> None:
    ledger = PublishedLedger("dpm.triggers", 3)
    for offset in (5, 7, 6, 10, 9, 1):
        ledger = ledger.with_offset(offset)
    assert ledger.ranges == ((1, 1), (5, 7), (9, 10))
    assert 6 in ledger
    assert 8 not in ledger
    assert 0 not in ledger
    assert PublishedLedger.decode(ledger.encode()) == ledger
    assert ledger.key == b"dpm.triggers/3"
    for offset in range(20, 20 + 2 * (MAX_RANGES + 10), 2):  # gaps everywhere: one range each
        ledger = ledger.with_offset(offset)
    assert len(ledger.ranges) == MAX_RANGES
    assert ledger.ranges[-1] == (offset, offset)
    assert 1 not in ledger  # the oldest went first
