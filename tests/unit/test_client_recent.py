"""The events a client remembers sending, by where the broker put them (typed decisions read no log for them)."""

from __future__ import annotations

from pipeline.client.recent import RecentEvents
from pipeline.core.events import CaseRef, Event, LogPosition

CASE = CaseRef("acme", "case-7")


def _event(seq: int, text: str) -> tuple[LogPosition, Event]:
    return LogPosition(0, seq - 1), Event(CASE, seq, "document", text)


def test_events_are_found_by_topic_and_position_only() -> None:
    recent = RecentEvents()
    recent.add("t.events", [_event(1, "income 84,000"), _event(2, "score 712")])
    assert recent.get("t.events", LogPosition(0, 1)) == Event(CASE, 2, "document", "score 712")
    assert recent.get("t.events-g2", LogPosition(0, 1)) is None  # another generation's topic: another log
    assert recent.get("t.events", LogPosition(1, 1)) is None


def test_the_oldest_text_is_forgotten_past_the_bound_and_an_event_larger_than_it_is_never_kept() -> None:
    recent = RecentEvents(max_chars=10)
    recent.add("t", [_event(1, "aaaa"), _event(2, "bbbb")])
    recent.add("t", [_event(3, "cccc")])  # 12 chars: the oldest goes
    assert recent.get("t", LogPosition(0, 0)) is None
    assert recent.get("t", LogPosition(0, 1)) is not None
    assert recent.get("t", LogPosition(0, 2)) is not None
    recent.add("t", [_event(4, "x" * 11)])
    assert recent.get("t", LogPosition(0, 3)) is None
    assert recent.get("t", LogPosition(0, 2)) is not None  # nothing was pushed out for it
