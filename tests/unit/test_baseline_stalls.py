"""An input partition counts as stalled only when records wait, none is in flight, and its commits stay put."""

from __future__ import annotations

from pipeline.workers.baseline.stalls import Stalls


def test_a_stall_is_reported_then_again_each_time_it_has_lasted_twice_as_long() -> None:
    stalls: Stalls[str] = Stalls(after_s=30)
    assert stalls.observe("e0", committed=10, end=40, in_flight=0, now=0) == 0.0
    assert stalls.observe("e0", committed=10, end=40, in_flight=0, now=29) == 0.0
    assert stalls.observe("e0", committed=10, end=40, in_flight=0, now=31) == 31
    assert stalls.observe("e0", committed=10, end=45, in_flight=0, now=60) == 0.0  # read again: given time to take
    assert stalls.observe("e0", committed=10, end=45, in_flight=0, now=62) == 62  # it did not: read again
    assert stalls.observe("e0", committed=10, end=45, in_flight=0, now=120) == 0.0
    assert stalls.observe("e0", committed=10, end=45, in_flight=0, now=124) == 124
    stalls.observe("e0", committed=12, end=45, in_flight=0, now=100)  # it moved on
    assert stalls.observe("e0", committed=12, end=45, in_flight=0, now=131) == 31  # a new stall is news again


def test_progress_records_in_flight_or_nothing_to_fetch_is_no_stall() -> None:
    stalls: Stalls[str] = Stalls(after_s=30)
    stalls.observe("e0", committed=10, end=40, in_flight=0, now=0)
    assert stalls.observe("e0", committed=11, end=40, in_flight=0, now=31) == 0.0  # it moved: the clock restarts
    assert stalls.observe("e0", committed=11, end=40, in_flight=0, now=60) == 0.0
    assert stalls.observe("e0", committed=11, end=40, in_flight=3, now=62) == 0.0  # a slow model holds it back
    assert stalls.observe("e0", committed=11, end=40, in_flight=0, now=90) == 0.0  # the clock restarted at 62
    assert stalls.observe("e0", committed=40, end=40, in_flight=0, now=200) == 0.0  # caught up
    assert stalls.observe("e0", committed=40, end=None, in_flight=0, now=300) == 0.0  # the end is not known


def test_partitions_no_longer_owned_are_forgotten() -> None:
    stalls: Stalls[str] = Stalls(after_s=30)
    stalls.observe("e0", committed=10, end=40, in_flight=0, now=0)
    stalls.keep_only({"e1"})
    assert stalls.observe("e0", committed=10, end=40, in_flight=0, now=31) == 0.0  # owned afresh: a new clock
