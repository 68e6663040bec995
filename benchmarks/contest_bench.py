"""Contesting decisions: does `--decisive` find the events a decision rests on, and what do contests cost?

In process, offline backend. The offline reader extracts fields by pattern and applies each domain's
policy: its figures show the machinery (leaving events out, re-deciding, reusing what the record
answers), not a model's judgement of prose.

Truth comes from the generator, which builds each case by inversion: the label first, then the field
values that imply it, then events that carry them. An event is truly decisive when the policy, given
the values without those that only this event carries, gives another label (`refer_if_unverified`
included, as the generator applies it). Recall: the share of truly decisive events the analysis reports
alone; precision: the share of the sets it reports that are truly decisive.

Cost: a what-if leaving out one cited event, and a decisive analysis, at 27,000 and 1,000,000
characters, DPM (200,000-token window, segment views reused) against Summ-only (it folds again from
the first changed event on): calls and tokens asked anew, against a re-decision from scratch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from benchmarks.long_horizon import BUDGET, SEGMENT_TOKENS, long_case
from pipeline.bench.draft import field_values
from pipeline.bench.generate import DOMAINS, GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.contest import Contested, ReusingBackend, decisive_events, leave_out, what_if
from pipeline.core.domains import refer_if_unverified, rules_for
from pipeline.core.hashing import events_digest, text_digest
from pipeline.core.run import RunResult, run_dpm, run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.core.verification import ReplayTarget
from pipeline.core.window import Window
from pipeline.llm.extractive.backend import ExtractiveBackend

PER_DOMAIN = 6
CASE_BUDGET = Budget(900)
COST_LENGTHS = (27_000, 1_000_000)
MAX_CALLS = 20_000
NOTE = ("offline backend: these figures show the contest machinery (leaving events out, re-deciding, reusing "
        "recorded answers), not a model's judgement")  # fmt: skip


def holders(case: Case) -> dict[str, set[int]]:
    """Per anchored field, the events (1-based) whose text carries its value."""
    found: dict[str, set[int]] = {}
    for anchor in case.required_anchors:
        found[anchor.key] = {i for i, e in enumerate(case.trajectory.events, start=1) if anchor.value in e.text}
    return found


def policy_label(case: Case, without: Iterable[int]) -> str:
    """The label the domain's policy gives the case's values once the events `without` are gone."""
    rules = rules_for(case.task.domain)
    assert rules is not None  # noqa: S101 - generated cases are of the rule-table domains
    gone = set(without)
    kept = {a.key: a.value for a in case.required_anchors if holders(case)[a.key] - gone}
    return refer_if_unverified(rules.verdict(field_values(kept), case.task.task), case.task.label_space).label


def truly_decisive(case: Case) -> set[int]:
    """The events without which the policy gives another label, each left out alone."""
    carriers = set().union(*holders(case).values()) if case.required_anchors else set()
    return {i for i in carriers if policy_label(case, (i,)) != case.label}


def decided(
    case: Case, architecture: Architecture, budget: Budget, window: Window | None
) -> tuple[Contested, RunResult]:
    run = run_dpm if architecture is Architecture.DPM else run_summ
    result = run(case.trajectory, case.task, budget, ExtractiveBackend(), window=window)
    target = ReplayTarget(architecture, result.variant, case.task, budget, events_digest(case.trajectory.events),
                          text_digest(result.view_text), None, result.window, result.segments)  # fmt: skip
    contested = Contested(target, case.trajectory, result.view, result.decision.label, result.decision.notice or "")
    return contested, result


def _accuracy(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    truth = sum(len(r["truly_decisive"]) for r in rows)
    found = sum(len(set(r["truly_decisive"]) & {g[0] for g in r["reported"] if len(g) == 1}) for r in rows)
    reported = sum(len(r["reported"]) for r in rows)
    right = sum(r["reported_truly_decisive"] for r in rows)
    return (round(found / truth, 3) if truth else None), (round(right / reported, 3) if reported else None)


def _accuracy_rows() -> list[dict[str, Any]]:
    rows = []
    for case in generate_cases(GenerationSpec(per_domain=PER_DOMAIN)):
        contested, result = decided(case, Architecture.DPM, CASE_BUDGET, None)
        analysis = decisive_events(contested, ReusingBackend(ExtractiveBackend(), result.calls, MAX_CALLS))
        truth = truly_decisive(case)
        rows.append({"case": case.ref.case_id, "domain": case.task.domain, "label": case.label,
                     "decided": contested.label, "truly_decisive": sorted(truth),
                     "reported": [list(g) for g in analysis.groups],
                     "reported_truly_decisive": sum(policy_label(case, g) != case.label for g in analysis.groups),
                     "tested": len(analysis.tested), "calls": analysis.calls,
                     "complete": analysis.complete})  # fmt: skip
    return rows


def _cost_rows() -> list[dict[str, Any]]:
    rows = []
    for chars in COST_LENGTHS:
        case = long_case(chars)
        for architecture in Architecture:
            window = Window(200_000, SEGMENT_TOKENS) if architecture is Architecture.DPM else None
            contested, result = decided(case, architecture, BUDGET, window)
            # The cited event nearest the middle of the case: Summ-only folds again from there on.
            middle = min(set(contested.view.cited_indices), key=lambda i: (abs(i - len(case.trajectory) // 2), i))
            started = time.perf_counter()
            one = what_if(contested, leave_out(middle), ReusingBackend(ExtractiveBackend(), result.calls))
            whatif_s = time.perf_counter() - started
            started = time.perf_counter()
            analysis = decisive_events(contested, ReusingBackend(ExtractiveBackend(), result.calls, MAX_CALLS))
            rows.append({"chars": chars, "arch": architecture.value, "events": len(case.trajectory),
                         "decision_calls": len(result.calls), "whatif_left_out": middle,
                         "whatif_calls": one.calls, "whatif_tokens": one.tokens,
                         "whatif_from_scratch_calls": one.from_scratch_calls,
                         "whatif_from_scratch_tokens": one.from_scratch_tokens, "whatif_s": round(whatif_s, 2),
                         "decisive_tested": len(analysis.tested), "decisive_calls": analysis.calls,
                         "decisive_tokens": analysis.tokens, "decisive_from_scratch_calls": analysis.from_scratch_calls,
                         "decisive_from_scratch_tokens": analysis.from_scratch_tokens,
                         "decisive_complete": analysis.complete,
                         "decisive_s": round(time.perf_counter() - started, 2)})  # fmt: skip
    return rows


def measure() -> dict[str, Any]:
    """The `contest` section of figures.json."""
    rows = _accuracy_rows()
    recall, precision = _accuracy(rows)
    by_domain = {}
    for domain in DOMAINS:
        mine = [r for r in rows if r["domain"] == domain]
        domain_recall, domain_precision = _accuracy(mine)
        by_domain[domain] = {"decisive_recall": domain_recall, "decisive_precision": domain_precision,
                             "cases": len(mine)}  # fmt: skip
    return {"decisive_recall": recall, "decisive_precision": precision, "by_domain": by_domain, "rows": rows,
            "cost": _cost_rows(), "max_calls": MAX_CALLS, "budget_chars": BUDGET.chars, "note": NOTE,
            "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}  # fmt: skip
