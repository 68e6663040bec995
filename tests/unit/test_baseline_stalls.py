"""Input partitions: stalled when records wait, none in flight and commits stay put; not idle while Kafka is away."""

from __future__ import annotations

import math

from pipeline.workers.baseline.stalls import IdleClocks, Stalls


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


def test_a_partition_is_idle_from_its_last_finished_record_or_its_assignment() -> None:
    clocks: IdleClocks[str] = IdleClocks()
    assert clocks.idle_for("events-0", 100.0) == math.inf  # never this member's
    clocks.assigned("events-0", 100.0)
    assert clocks.idle_for("events-0", 130.0) == 30.0
    clocks.finished("events-0", 140.0)
    assert clocks.idle_for("events-0", 150.0) == 10.0
    clocks.assigned("events-0", 200.0)  # a rebalance: read again from its commit
    assert clocks.idle_for("events-0", 205.0) == 5.0


def test_time_kafka_did_not_answer_is_not_idleness() -> None:
    clocks: IdleClocks[str] = IdleClocks()
    clocks.finished("events-0", 100.0)  # then the broker went away for 70 s: folding waited on it
    clocks.kafka_failed(150.0)
    clocks.kafka_failed(170.0)  # the last request that failed, just before the broker came back
    assert clocks.idle_for("events-0", 175.0) == 5.0  # not 75 s: a trigger waiting for it keeps waiting
    clocks.kafka_failed(160.0)  # a failure reported late never moves the clock back
    assert clocks.idle_for("events-0", 175.0) == 5.0
