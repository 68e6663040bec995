"""The EventLog contract, written once; run against the in-memory log (unit) and Kafka (integration)."""

from __future__ import annotations

import pytest

from pipeline.core.event_log import EventLog, PositionOutOfRangeError
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

    def erased_position(self) -> LogPosition:
        """A position of the log that holds no record any more (compacted away, or a tombstone)."""
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

    def test_a_position_past_the_end_of_the_log_is_refused(self) -> None:
        a_positions, _ = self._interleaved()
        beyond = LogPosition(a_positions[-1].partition, a_positions[-1].offset + 1000)
        with pytest.raises(PositionOutOfRangeError, match="never written"):
            self.log().read([a_positions[0], beyond])

    def test_positions_that_hold_no_record_any_more_are_reported_missing(self) -> None:
        a_positions, _ = self._interleaved()
        erased = self.erased_position()
        read = self.log().read([a_positions[0], erased])
        assert len(read.records) == 1
        assert read.missing == (erased,)

    def test_scan_finds_only_the_case_own_records(self) -> None:
        self._interleaved()
        read = self.log().scan(A)
        assert [EventRecord.decode(r.value).event.text for r in read.records] == [f"A event {i}" for i in range(1, 6)]
        assert all((r.key or b"").startswith(b"tenant-a/case-1/") for r in read.records)

    def test_close_and_far_apart_positions_come_back_exactly(self) -> None:
        """Close positions (read through) and far-apart ones (sought), given out of order, across other traffic."""
        wanted: dict[LogPosition, str] = {}
        for group in range(6):
            # About 300 records of other cases per partition between groups: more than a read goes through.
            noise = [Event(CaseRef("tenant-z", f"noise-{group}-{n}"), 1, "doc", "z" * 50) for n in range(900)]
            self.append(noise)
            for seq in range(1, 2 if group % 2 else 4):  # dense groups of three, isolated single positions
                text = f"A {group}.{seq}"
                wanted[self.append([Event(CaseRef("tenant-a", f"far-{group}"), seq, "doc", text)])[0]] = text
        asked = sorted(wanted, key=lambda p: (p.offset * 7919) % 1009)  # a scrambled order
        read = self.log().read(asked)
        assert read.missing == ()
        assert [EventRecord.decode(r.value).event.text for r in read.records] == [wanted[p] for p in asked]
        assert [r.position for r in read.records] == asked
