"""A segmented decision's records: the tree in the decision record, replay and verify-recorded of every call."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.prompt import PromptLayout, prompt_layout
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult, run_dpm
from pipeline.core.segments import DictSegmentStore
from pipeline.core.task import Budget
from pipeline.core.verification import ReplayStatus, verify_recorded, verify_replay
from pipeline.core.window import Window
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.audit import calls_in_order
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance
from pipeline.wire.rejection import RejectedError
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.segment import SegmentViewRecord, case_prefix
from pipeline.wire.trigger import DecisionId
from pipeline.wire.validation import validate

CASE = generate_cases(GenerationSpec(domains=("loan",), per_domain=1))[0]  # a reference-size case, 26-28k characters
BUDGET = Budget(700)
WINDOW = Window(tokens=4096, segment_tokens=3000)


def _published(result: RunResult) -> RunRecords:
    provenance = Provenance(DecisionId("d-1", result.architecture), (), PositionsSource.TRIGGER, "extractive", "test")
    return run_records(result, CASE.trajectory, task=CASE.task, budget=BUDGET, provenance=provenance)


def _segmented(store: DictSegmentStore | None = None) -> RunRecords:
    return _published(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend(), window=WINDOW, store=store))


def test_the_decision_record_carries_the_window_and_the_tree_and_reads_back() -> None:
    records = _segmented()
    wire = records.decision.to_wire()
    validate(SchemaId.DECISION, wire)
    assert wire["window"]["tokens"] == WINDOW.tokens
    assert len(wire["segments"]) > 2
    assert DecisionRecord.from_wire(orjson.loads(records.decision.encode())) == records.decision
    assert len(records.audits) == records.decision.llm_calls  # one audit record per call


def test_a_decision_that_fits_writes_no_window_or_tree() -> None:
    plain = _published(run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend(), window=Window(200_000, 50_000)))
    assert "window" not in plain.decision.to_wire()
    assert "segments" not in plain.decision.to_wire()


@pytest.mark.parametrize("reuse", [False, True])
def test_a_segmented_decision_replays_match_and_verifies_from_its_recorded_calls(reuse: bool) -> None:
    store = DictSegmentStore()
    if reuse:
        _segmented(store)  # an earlier decision left every view in the store
    records = _segmented(store)
    assert any(n.reused for n in records.decision.segments) is reuse
    target = records.decision.replay_target()
    assert records.self_check().status is ReplayStatus.MATCH
    assert verify_replay(target, CASE.trajectory, None, ExtractiveBackend()).status is ReplayStatus.MATCH
    if not reuse:  # every call is recorded: the recorded answers alone replay the whole tree
        recorded = RecordedAnswers(calls_in_order(records.audits))
        assert verify_replay(target, CASE.trajectory, None, recorded).status is ReplayStatus.MATCH


def test_a_recorded_leaf_answer_that_was_altered_is_drift() -> None:
    records = _segmented()
    calls = calls_in_order(records.audits)
    first = calls[0]
    altered = ModelCall(
        first.request, replace(first.response, text=first.response.text.replace("FACTS:", "FACTS:\n- forged [1]"))
    )
    report = verify_recorded(records.decision.replay_target(), [altered, *calls[1:]])
    assert report.status is ReplayStatus.DRIFT
    assert "segment tree" in report.detail


def test_a_tree_whose_recorded_view_digest_was_altered_is_drift() -> None:
    records = _segmented()
    nodes = list(records.decision.segments)
    nodes[0] = replace(nodes[0], view_sha256="0" * 64)
    target = replace(records.decision.replay_target(), segments=tuple(nodes))
    report = verify_recorded(target, calls_in_order(records.audits))
    assert report.status is ReplayStatus.DRIFT


def test_a_segment_view_record_is_sealed_and_refused_when_its_digest_does_not_match(tmp_path: Path) -> None:
    keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), MemoryKeyTopic())
    record = SegmentViewRecord(CASE.ref, "ab" * 32, "FACTS:\n- Loan amount: $250,000 [1]\nREASONING:\nunknown")
    sealed = record.encode(keys)
    assert b"250,000" not in sealed
    validate(SchemaId.SEGMENT, orjson.loads(record.encode(None)))
    assert SegmentViewRecord.decode(sealed, keys) == record
    assert record.record_key.startswith(case_prefix(CASE.ref))
    forged = orjson.loads(record.encode(None))
    forged["view"] += " [2]"
    with pytest.raises(RejectedError, match="digest"):
        SegmentViewRecord.decode(orjson.dumps(forged), None)
    keys.erase_case(CASE.ref)
    with pytest.raises(RejectedError):
        SegmentViewRecord.decode(sealed, keys)


def test_a_decision_with_the_log_first_records_it_and_replays_verifies_and_reuses_views_in_that_layout() -> None:
    store = DictSegmentStore()
    first = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend(), window=WINDOW, store=store,
                    layout=PromptLayout.EVENTS_FIRST)  # fmt: skip
    records = _published(first)
    wire = orjson.loads(records.decision.encode())
    validate(SchemaId.DECISION, wire)
    assert wire["prompt_layout"] == "events-first"
    assert DecisionRecord.from_wire(wire).prompt_layout is PromptLayout.EVENTS_FIRST
    assert {prompt_layout(c.request.prompt) for c in first.calls[:-1]} == {PromptLayout.EVENTS_FIRST}
    target = records.decision.replay_target()
    assert verify_replay(target, CASE.trajectory, None, ExtractiveBackend()).status is ReplayStatus.MATCH
    recorded = RecordedAnswers(calls_in_order(records.audits))
    assert verify_replay(target, CASE.trajectory, None, recorded).status is ReplayStatus.MATCH
    assert verify_recorded(target, calls_in_order(records.audits)).status is ReplayStatus.MATCH
    # Built in the other layout, no request is the one recorded: the recorded answers answer none.
    other = replace(target, layout=PromptLayout.TASK_FIRST)
    assert verify_replay(other, CASE.trajectory, None, RecordedAnswers(calls_in_order(records.audits))).status \
        is ReplayStatus.DRIFT  # fmt: skip
    again = run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend(), window=WINDOW, store=store,
                    layout=PromptLayout.EVENTS_FIRST)  # fmt: skip
    assert all(n.reused for n in again.segments if n.level == 0)  # the segment views of the first decision
    assert again.view_text == first.view_text


def test_a_record_without_a_layout_put_the_task_first() -> None:
    wire = orjson.loads(_segmented().decision.encode())
    assert "prompt_layout" not in wire  # the first layout is written as before
    assert DecisionRecord.from_wire(wire).replay_target().layout is PromptLayout.TASK_FIRST
