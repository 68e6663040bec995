"""The baseline's handled-trigger record: redeliveries skipped, duplicates refused once."""

from __future__ import annotations

from pipeline.core.events import LogPosition
from pipeline.workers.baseline.state import HandledTriggers


def test_handled_triggers_tell_a_redelivery_from_a_duplicate_and_keep_refusals() -> None:
    first, resent = LogPosition(0, 4), LogPosition(0, 9)
    handled = HandledTriggers().add("t1", first, refused=False, keep=64)
    assert handled.decided("t1")
    assert handled.handled_at(first)
    assert not handled.handled_at(resent)
    handled = handled.add("t1", resent, refused=True, keep=64)
    assert handled.handled_at(resent)  # the refused record read again is skipped, not refused twice
    assert HandledTriggers.from_json(handled.to_json()) == handled
    assert HandledTriggers.from_json([["old", [1, 2]]]).decided("old")  # entries stored before refusals were kept
    assert len(handled.add("t2", LogPosition(1, 0), refused=False, keep=2).entries) == 2
