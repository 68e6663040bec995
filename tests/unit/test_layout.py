"""The topic layout: generation names, the layout record, and the partition-count check (no broker)."""

from __future__ import annotations

import datetime as dt

import pytest

from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.partitioning import case_partition, key_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.wire.layout import Layout, Retired, partition_problems
from pipeline.wire.rejection import RejectedError
from pipeline.wire.validation import SchemaError

NAMES = TopicNames("bank")
NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def test_a_generation_renames_only_the_topics_partitioned_by_case() -> None:
    grown = NAMES.of_generation(3)
    assert grown.case_partitioned() == ("bank.events-g3", "bank.triggers-g3", "bank.keys-g3", "bank.segments-g3")
    assert NAMES.case_partitioned() == ("bank.events", "bank.triggers", "bank.keys", "bank.segments")
    assert (grown.views, grown.decisions, grown.audit, grown.dlq, grown.layout) == (
        NAMES.views, NAMES.decisions, NAMES.audit, NAMES.dlq, NAMES.layout)  # fmt: skip
    assert (NAMES.baseline_app, grown.baseline_app) == ("bank-baseline", "bank-baseline-g3")
    assert NAMES.of_tenant("acme").of_generation(2).events == "bank.acme.events-g2"
    with pytest.raises(ValueError, match="count from 1"):
        NAMES.of_generation(0)


def test_a_growth_retires_the_generation_and_records_what_it_copied() -> None:
    first = Layout("bank.", 1, 6)
    second = first.grown(12, events_copied=4_000, now=NOW)
    assert (second.generation, second.partitions, second.since) == (2, 12, "2026-12-02T12:00:00Z")
    assert second.retired == (Retired(1, 6, 4_000),)
    assert second.grown(24, 9_000, NOW).generations() == (1, 2, 3)
    with pytest.raises(ValueError, match="needs more than the 12"):
        second.grown(12, 0, NOW)


def test_the_layout_record_round_trips_and_is_validated() -> None:
    layout = Layout("bank.", 1, 6).grown(8, 10, NOW)
    assert Layout.decode(layout.encode()) == layout
    assert layout.key == b"bank."
    with pytest.raises(SchemaError, match="generation"):
        Layout.decode(b'{"schema": "dpm.layout.v1", "scope": "bank.", "generation": 0, "partitions": 6, "retired": []}')
    with pytest.raises(RejectedError):
        Layout.decode(b"not json")


def test_a_count_other_than_the_recorded_one_or_a_missing_topic_is_a_problem() -> None:
    layout = Layout("bank.", 1, 6)
    assert partition_problems(layout, {"bank.events": 6, "bank.triggers": 6}) == []
    problems = partition_problems(layout, {"bank.events": 8, "bank.triggers": None})
    assert problems[0].startswith("bank.events has 8 partitions, but its layout records 6")
    assert "kafka-topics --alter" in problems[0]
    assert problems[1].startswith("bank.triggers is missing")


def test_a_copied_record_goes_to_its_case_s_partition_and_a_key_naming_no_case_keeps_its_number() -> None:
    case = CaseRef("acme", "loan-7")
    for key in (b"acme/loan-7/3", b"acme/loan-7"):  # an event's key, a data key's
        assert key_partition(key, 1, 12) == case_partition(case, 12)
    assert key_partition(b"garbage", 5, 12) == 5
    assert key_partition(None, 7, 4) == 3
