"""Runs architectures over cases at budgets and scores every decision (in-process or through Kafka)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from pipeline.core.case import Case
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelBackend
from pipeline.core.prompt import PromptLayout
from pipeline.core.run import RunResult, SummVariant, run_dpm, run_summ
from pipeline.core.scoring import Judge, eda, frp
from pipeline.core.task import Architecture, Budget, resolve_budget
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance
from pipeline.wire.event import append_events
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.trajectory import assemble
from pipeline.wire.trigger import DecisionId
from pipeline.wire.view import ViewRecord


@dataclass(frozen=True)
class BudgetPoint:
    """A named budget (tight, 1338, rho=20) resolved to characters for one case."""

    name: str
    budget: Budget


def resolve_budgets(specs: Sequence[str], cases: Sequence[Case]) -> dict[str, list[BudgetPoint]]:
    """Budget points per case.

    Names are shares of the run's mean trajectory length; numbers are characters; `rho=R` is the
    case's own length divided by R (a compression ratio).
    """
    mean_chars = fmean(c.trajectory.char_length for c in cases)
    points: dict[str, list[BudgetPoint]] = {}
    for case in cases:
        resolved = []
        for spec in specs:
            if spec.startswith("rho="):
                rho = float(spec.removeprefix("rho="))
                resolved.append(BudgetPoint(spec, Budget(max(200, round(case.trajectory.char_length / rho)))))
            else:
                name, budget = resolve_budget(spec, mean_chars)
                resolved.append(BudgetPoint(name, budget))
        points[case.ref.key] = resolved
    return points


def run_in_process(
    case: Case,
    arch: Architecture,
    budget: Budget,
    backend: ModelBackend,
    variant: SummVariant = SummVariant.REWRITE,
    *,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> RunResult:
    """One run through the in-memory log: append the events, read them back by position, run."""
    log = InMemoryEventLog()
    positions = append_events(log, case.trajectory.events)
    trajectory, _ = assemble(case.ref, log.read(positions), len(positions))
    if arch is Architecture.DPM:
        return run_dpm(trajectory, case.task, budget, backend, layout=layout)
    return run_summ(trajectory, case.task, budget, backend, variant)


def records_of(case: Case, result: RunResult, budget: Budget, backend: str) -> RunRecords:
    """The records an in-process run would publish (the trigger id names the case and the budget)."""
    decision_id = DecisionId(f"{case.ref.case_id}@{budget.chars}", result.architecture)
    provenance = Provenance(decision_id, (), PositionsSource.IN_MEMORY, backend, "eval")
    return run_records(result, case.trajectory, task=case.task, budget=budget, provenance=provenance)


def score_row(
    case: Case, point: BudgetPoint, decision: DecisionRecord, view: ViewRecord, *, audits: int, judge: Judge
) -> dict[str, Any]:
    """One results.jsonl row from the published records of a decision."""
    outcome = decision.outcome
    output = "\n".join((view.text, outcome.rationale, outcome.notice))
    judged = judge.grade(case, output)
    checks = decision.view_checks
    return {
        "case_id": case.ref.case_id,
        "domain": case.domain,
        "arch": decision.architecture.value,
        "variant": None if decision.variant is None else decision.variant.value,
        "budget": point.name,
        "budget_chars": point.budget.chars,
        "trajectory_chars": case.trajectory.char_length,
        "frp": frp(case, output),
        "rcs": judged.rcs,
        "eda": eda(case, outcome.label),
        "crr": judged.crr,
        "llm_calls": decision.llm_calls,
        "audit_records": audits,
        "wall_s": decision.latency_s,
        "view_sha256": decision.view_sha256,
        "view_chars": decision.view_chars,
        "decision": outcome.label,
        "label": case.label,
        "citation_validity": checks.citation_validity,
        "grounding_rate": checks.grounding_rate,
        "input_tokens": decision.usage.input_tokens,
        "output_tokens": decision.usage.output_tokens,
        "cost_usd": decision.cost_usd,
        "judge": judge.name,
        "backend": decision.backend,
        "model": decision.model,
    }


def evaluate_case(
    case: Case,
    points: Sequence[BudgetPoint],
    archs: Sequence[Architecture],
    backend: ModelBackend,
    *,
    judge: Judge,
    variant: SummVariant = SummVariant.REWRITE,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> list[dict[str, Any]]:
    """Every (arch, budget) row of one case, in-process."""
    rows = []
    for point in points:
        for arch in archs:
            result = run_in_process(case, arch, point.budget, backend, variant, layout=layout)
            published = records_of(case, result, point.budget, backend.name)
            rows.append(score_row(case, point, published.decision, published.view, audits=len(published.audits),
                                  judge=judge))  # fmt: skip
    return rows
