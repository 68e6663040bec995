"""Which fetched records faust dropped without handing them over: the first of each partition's, or none."""

from __future__ import annotations

from dataclasses import dataclass

from faust.types import TP

from pipeline.workers.baseline.transport import dropped_from

EVENTS, TRIGGERS = TP("events", 0), TP("triggers", 1)


@dataclass(frozen=True)
class _Record:
    offset: int


def _batch(**offsets: range) -> dict[TP, list[_Record]]:
    return {TP(name, 0 if name == "events" else 1): [_Record(o) for o in rng] for name, rng in offsets.items()}


def test_a_batch_handed_over_whole_drops_nothing() -> None:
    fetched = _batch(events=range(5, 9), triggers=range(2))
    assert dropped_from(fetched, {EVENTS: {5, 6, 7, 8}, TRIGGERS: {0, 1}}) == {}


def test_a_batch_cut_short_drops_from_the_first_record_not_handed_over() -> None:
    # faust stops handing over when the flow stops or the generation changes: the rest of every partition's
    fetched = _batch(events=range(5, 9), triggers=range(2))
    assert dropped_from(fetched, {EVENTS: {5, 6}}) == {EVENTS: 7, TRIGGERS: 0}


def test_a_partition_skipped_midway_drops_from_its_first_skipped_record() -> None:
    # paused and resumed while the batch was handed over: a hole, not only a cut-off tail
    fetched = _batch(events=range(5, 9))
    assert dropped_from(fetched, {EVENTS: {5, 8}}) == {EVENTS: 6}
