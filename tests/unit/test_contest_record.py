"""The contest record on the wire (pipeline/wire/contest.py): requests kept as digests, split when too large, v1 read.

A contest of a large case once carried each re-decision's whole request (the case's prompt) and passed the
1,000,000-byte record limit; these tests decide cases of growing size offline and check what is recorded.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.contest import (
    Answer,
    Contested,
    Decisive,
    ReusingBackend,
    answering_from,
    decisive_events,
    leave_out,
    what_if,
)
from pipeline.core.hashing import events_digest, json_digest, text_digest
from pipeline.core.run import ModelCall, RunResult, run_dpm
from pipeline.core.task import Architecture, Budget
from pipeline.core.verification import ReplayStatus, ReplayTarget
from pipeline.core.window import Window
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services.contest import Found, replay_contest
from pipeline.wire.audit import call_to_wire
from pipeline.wire.contest import (
    Asker,
    ContestKind,
    ContestPart,
    ContestRecord,
    ContestTooLargeError,
    Run,
    decisive_outcome,
    usage_of,
)
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseErasedError, seal_body
from pipeline.wire.trigger import DecisionId

BUDGET = Budget(900)
OFFLINE = ExtractiveBackend()
WINDOW = Window(200_000, 16_000)  # what the worker cuts with for the offline backend
RECORD_LIMIT = 1_000_000  # librdkafka's message.max.bytes


@cache
def loan_case(events: int, chars: int) -> Case:
    spec = GenerationSpec(domains=("loan",), per_domain=1, events=(events, events), chars=(chars, chars), tenant="t")
    return generate_cases(spec)[0]


@cache
def decided(events: int, chars: int) -> tuple[Contested, RunResult]:
    case = loan_case(events, chars)
    result = run_dpm(case.trajectory, case.task, BUDGET, OFFLINE, window=WINDOW)
    target = ReplayTarget(Architecture.DPM, result.variant, case.task, BUDGET, events_digest(case.trajectory.events),
                          text_digest(result.view_text), None, result.window, result.segments)  # fmt: skip
    return Contested(target, case.trajectory, result.view, result.decision.label, result.decision.notice or ""), result


@cache
def analysis(events: int, chars: int) -> tuple[Decisive, ContestRecord]:
    """A decisive analysis of the case, as `dpm explain --decisive` records it."""
    contested, result = decided(events, chars)
    backend = ReusingBackend(OFFLINE, result.calls, max_calls=200)
    decisive = decisive_events(contested, backend)
    case = loan_case(events, chars)
    record = ContestRecord(
        contest_id="0" * 32, kind=ContestKind.DECISIVE, case=case.ref,
        decision_id=DecisionId.parse(f"{case.ref.case_id}:dpm"), asker=Asker("os:tester", 1), backend="extractive",
        model=OFFLINE.model, changes=(), runs=tuple(Run.of(r) for r in decisive.runs), answers=backend.answers,
        outcome=decisive_outcome(decisive), usage=usage_of(decisive.runs, backend.asked, backend.reused, 200),
    )  # fmt: skip
    return decisive, record


def found_for(events: int, chars: int) -> Found:
    """What replay_contest reads of the contested decision: its events, view and recorded calls."""
    contested, result = decided(events, chars)
    return Found(cast(Any, None), cast(Any, None), contested, tuple(result.calls))


def case_keys(tmp_path: Path) -> CaseKeys:
    return CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), MemoryKeyTopic())


# An ordinary generated case (the one the failure was found on: 89 events, 36 KB) and one of a million characters.
ORDINARY, LARGE = (89, 36_000), (400, 1_000_000)


def test_a_contest_records_each_request_as_its_digest_so_its_size_does_not_grow_with_the_case() -> None:
    sizes = {}
    for shape in (ORDINARY, LARGE):
        decisive, record = analysis(*shape)
        assert decisive.calls >= 10, "the analysis asked the model anew many times"
        value = record.encode(None)
        # What is left grows with the calls asked (each answer within the budget's response), never with the case.
        per_call = (len(value) - 20_000) / decisive.calls
        assert per_call < 4 * BUDGET.chars, (shape, per_call)
        assert len(value) < RECORD_LIMIT // 4, shape
        prompt = decided(*shape)[1].calls[0].request
        assert prompt.system[:200].encode() not in value, "no request is kept"
        sizes[shape] = len(value)
    assert sizes[LARGE] < 3 * sizes[ORDINARY], sizes  # 28 times the case, not 28 times the record


def test_a_large_cases_contest_fits_one_record_and_replays_match(tmp_path: Path) -> None:
    keys = case_keys(tmp_path)
    _, record = analysis(*LARGE)
    [only] = record.encoded(keys, RECORD_LIMIT - 4_096)
    back = ContestRecord.decode(only.value, keys)
    assert back == record
    assert replay_contest(back, found_for(*LARGE)).status is ReplayStatus.MATCH


def test_a_contest_over_the_record_limit_is_split_into_parts_that_join_and_replay_match(tmp_path: Path) -> None:
    keys = case_keys(tmp_path)
    _, record = analysis(*LARGE)
    limit = 40_000
    records = record.encoded(keys, limit)
    assert len(records) >= 3, "parts, then the head"
    assert all(len(r.key) + len(r.value) <= limit for r in records)
    *parts, head = records
    assert head.key == record.record_key
    assert head.schema is SchemaId.CONTEST
    assert {p.schema for p in parts} == {SchemaId.CONTEST_PART}
    assert all(p.key.startswith(record.record_key + b"/part/") for p in parts)
    read = ContestRecord.decode(head.value, keys)
    assert read.answers == ()
    assert len(read.parts) == len(parts)
    joined = read.joined({p.part: p for p in (ContestPart.decode(r.value, keys) for r in parts)})
    assert joined.answers == record.answers
    assert replay_contest(joined, found_for(*LARGE)).status is ReplayStatus.MATCH
    keys.erase_case(record.case)
    keys.sync()
    with pytest.raises(CaseErasedError):  # the parts are sealed under the case's key: they go with it
        ContestPart.decode(parts[0].value, keys)


def test_a_part_missing_or_not_the_one_listed_is_refused(tmp_path: Path) -> None:
    keys = case_keys(tmp_path)
    _, record = analysis(*ORDINARY)
    *parts, head = record.encoded(keys, 20_000)
    read = ContestRecord.decode(head.value, keys)
    found = {p.part: p for p in (ContestPart.decode(r.value, keys) for r in parts)}
    with pytest.raises(RejectedError, match=r"part 1 of .* is missing"):
        read.joined({n: p for n, p in found.items() if n != 1})
    swapped = {**found, 1: found[2]}
    with pytest.raises(RejectedError, match="does not match its digest"):
        read.joined(swapped)


def test_a_single_answer_over_the_limit_is_refused_before_anything_is_written() -> None:
    _, record = analysis(*ORDINARY)
    with pytest.raises(ContestTooLargeError, match="over 2,000 bytes"):
        record.encoded(None, 2_000)


def test_a_request_the_log_no_longer_builds_finds_no_answer_and_replay_says_drift() -> None:
    _, record = analysis(*ORDINARY)
    contested, result = decided(*ORDINARY)
    run = record.runs[0]
    with_other_answers = [Answer("0" * 64, a.purpose, a.response) for a in record.answers]
    replayed = replay_contest(replace(record, answers=tuple(with_other_answers)), found_for(*ORDINARY))
    assert replayed.status is ReplayStatus.DRIFT
    assert "cannot be rerun" in replayed.detail
    again = what_if(contested, leave_out(*run.left_out), answering_from((*result.calls, *record.answers)))
    assert Run.of(again) == run


def test_a_v1_record_with_whole_requests_is_still_read_and_replays_match(tmp_path: Path) -> None:
    keys = case_keys(tmp_path)
    contested, result = decided(*ORDINARY)
    backend = ReusingBackend(OFFLINE, result.calls)
    outcome = what_if(contested, leave_out(contested.view.cited_indices[0]), backend)
    _, current = analysis(*ORDINARY)
    v1 = {**current.to_wire(), "schema": SchemaId.CONTEST_V1.value, "kind": "whatif",
          "changes": [{"index": contested.view.cited_indices[0], "action": "leave-out"}],
          "runs": [Run.of(outcome).wire()], "calls": [call_to_wire(c) for c in backend.asked]}  # fmt: skip
    del v1["parts"]
    v1["runs_sha256"] = json_digest(v1["runs"])
    record = ContestRecord.decode(orjson.dumps(seal_body(v1, keys)), keys)
    assert record.answers == tuple(Answer.of(ModelCall(c.request, c.response)) for c in backend.asked)
    assert replay_contest(record, found_for(*ORDINARY)).status is ReplayStatus.MATCH
