"""`dpm compare`'s arithmetic: agreement over triggers decided by both, accuracy against trigger labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.core.events import CaseRef
from pipeline.core.model import Usage
from pipeline.core.run import run_dpm
from pipeline.core.task import Architecture, Budget
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services.compare import compare
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance
from pipeline.wire.run_records import run_records
from pipeline.wire.trigger import DecisionId, DecisionRequest
from tests.cases import load_fixture

CASE = load_fixture()
_RUN = run_dpm(CASE.trajectory, CASE.task, Budget(700), ExtractiveBackend())
_BASE = run_records(_RUN, CASE.trajectory, task=CASE.task, budget=Budget(700),
                      provenance=Provenance(DecisionId("t0", Architecture.DPM), (), PositionsSource.TRIGGER,
                                            "extractive", "unit")).decision  # fmt: skip


def _decision(trigger: str, arch: str, label: str | None, calls: int, tenant: str | None = None) -> DecisionRecord:
    return replace(
        _BASE,
        decision_id=DecisionId(trigger, Architecture(arch)),
        case=CaseRef(tenant, CASE.ref.case_id) if tenant else CASE.ref,
        outcome=replace(_BASE.outcome, label=label),
        llm_calls=calls,
        usage=Usage(100 * calls, 10 * calls),
        latency_s=0.1 * calls,
        cost_usd=0.001 * calls,
    )


def _trigger(trigger: str, label: str | None) -> DecisionRequest:
    return DecisionRequest(trigger, CASE.ref, CASE.task, 700, tuple(Architecture), label=label)


def test_agreement_accuracy_and_costs() -> None:
    decisions = {
        d.key: d
        for d in (
            _decision("t1", "dpm", "DENY", 2), _decision("t1", "summ", "DENY", 91),
            _decision("t2", "dpm", "APPROVE", 2), _decision("t2", "summ", "DENY", 91),
            _decision("t3", "dpm", "APPROVE", 2), _decision("t3", "summ", None, 91),
            _decision("t4", "dpm", "APPROVE", 2),  # decided by one architecture only: not compared
        )
    }  # fmt: skip
    triggers = {(CASE.ref.tenant, t): _trigger(t, label) for t, label in (("t1", "DENY"), ("t2", "APPROVE"),
                                                                          ("t3", None))}  # fmt: skip
    result = compare(decisions, triggers)
    assert result.pairs == 3
    assert result.agreement == pytest.approx(1 / 3)
    dpm, summ = result.per_arch
    assert (dpm.architecture, dpm.accuracy, dpm.labelled, dpm.mean_calls) == (Architecture.DPM, 1.0, 2, 2)
    assert (summ.accuracy, summ.failures, summ.mean_calls) == (0.5, 1, 91)
    assert summ.total_cost_usd == pytest.approx(0.273)


def test_two_tenants_with_one_trigger_id_are_two_triggers() -> None:
    """A decision is its tenant's: the same trigger id in two tenants is never paired across them."""
    pair = [_decision("same", "dpm", "DENY", 2, "bank-a"), _decision("same", "summ", "DENY", 91, "bank-a")]
    alone = [_decision("same", "dpm", "APPROVE", 2, "bank-b")]  # bank-b's trigger was decided by DPM only
    result = compare({d.key: d for d in (*pair, *alone)}, {})
    assert result.pairs == 1
    assert result.agreement == 1.0
