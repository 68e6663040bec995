"""The EventLog contract, written once; run against the in-memory log (unit) and Kafka (integration)."""

from __future__ import annotations

from pipeline.core.event_log import EventLog
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.wire.event import EventRecord

A = CaseRef("tenant-a", "case-1")
B = CaseRef("tenant-b", "case-1")


class EventLogContract:
    """Subclasses provide `log()` and `append(events) -> positions`, writing to the same log."""

    def log(self) -> EventLog:
        raise NotImplementedError

    def append(self, events: list[Event]) -> list[LogPosition]:
        raise NotImplementedError

    def _interleaved(self) -> tuple[list[LogPosition], list[LogPosition]]:
        a_positions: list[LogPosition] = []
        b_positions: list[LogPosition] = []
        for seq in range(1, 6):
            a_positions += self.append([Event(A, seq, "doc", f"A event {seq}")])
            b_positions += self.append([Event(B, seq, "doc", f"B event {seq}")])
        return a_positions, b_positions

    def test_reads_exactly_the_asked_positions_in_order(self) -> None:
        a_positions, _ = self._interleaved()
        read = self.log().read(list(reversed(a_positions[1:4])))
        texts = [EventRecord.decode(r.value).event.text for r in read.records]
        assert texts == ["A event 4", "A event 3", "A event 2"]
        assert read.missing == ()

    def test_positions_that_hold_nothing_are_reported_missing(self) -> None:
        a_positions, _ = self._interleaved()
        beyond = LogPosition(a_positions[-1].partition, a_positions[-1].offset + 1000)
        read = self.log().read([a_positions[0], beyond])
        assert len(read.records) == 1
        assert read.missing == (beyond,)

    def test_scan_finds_only_the_case_own_records(self) -> None:
        self._interleaved()
        read = self.log().scan(A)
        assert [EventRecord.decode(r.value).event.text for r in read.records] == [f"A event {i}" for i in range(1, 6)]
        assert all((r.key or b"").startswith(b"tenant-a/case-1/") for r in read.records)
