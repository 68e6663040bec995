"""The three answers of the offline backend: projection, Summ-only step and decision."""

from __future__ import annotations

import re

from pipeline.core.decision import is_negative, render_decision
from pipeline.core.domains import refer_if_unverified, rules_for
from pipeline.core.fields import extract_fields
from pipeline.core.parse import parse_view
from pipeline.core.prompt import DecisionPrompt, MergePrompt, ProjectionPrompt, SummarizationPrompt
from pipeline.core.task import TaskSpec
from pipeline.core.view import MemoryView
from pipeline.llm.extractive.candidates import rank_candidates
from pipeline.llm.extractive.compose import compose


def project(prompt: ProjectionPrompt) -> MemoryView:
    """DPM: rank every candidate of the whole log globally, then pack within the budget."""
    rules = rules_for(prompt.task.domain)
    ranked, values = rank_candidates([(e.index, e.text) for e in prompt.events], prompt.task, rules)
    return compose(ranked, values, rules, prompt.budget, task=prompt.task)


def merge(prompt: MergePrompt) -> MemoryView:
    """Partial views into one: their facts compete again, ranked and packed as one projection's would be.

    A fact is ranked at its latest cited event (as a Summ-only step carries facts over), so a value
    a later stretch corrected still wins.
    """
    rules = rules_for(prompt.task.domain)
    facts = [fact for view in prompt.views for fact in parse_view(view.text).view.facts if fact.citations]
    ranked, values = rank_candidates([(max(f.citations), f.text) for f in facts], prompt.task, rules)
    return compose(ranked, values, rules, prompt.budget, task=prompt.task)


def summarize(prompt: SummarizationPrompt) -> MemoryView:
    """Summ-only update U(m, e): re-rank the current summary's facts with the new event's candidates.

    An update must incorporate the new event, so the event's best candidate enters first and
    the rest competes for what space is left; what is evicted is gone for every later step.
    That is the path dependence of a per-event summarizer, made explicit.
    """
    rules = rules_for(prompt.task.domain)
    previous = parse_view(prompt.summary).view
    carried = [(max(f.citations), f.text) for f in previous.facts if f.citations]
    ranked, values = rank_candidates([*carried, (prompt.event.index, prompt.event.text)], prompt.task, rules)
    fresh = next((c for c in ranked if prompt.event.index in c.fact.citations), None)
    return compose(ranked, values, rules, prompt.budget, task=prompt.task, must_include=fresh)


def _vote(view_text: str, label_space: tuple[str, ...]) -> str:
    """Generic decision: the label the view names most often, longer labels counted first; ties go to the first."""
    remaining = view_text.upper()
    counts: dict[str, int] = {}
    for label in sorted(label_space, key=len, reverse=True):
        pattern = rf"(?<!\w){re.escape(label.upper())}(?!\w)"
        counts[label] = len(re.findall(pattern, remaining))
        remaining = re.sub(pattern, " ", remaining)
    return max(label_space, key=lambda label: counts[label])  # max keeps the first of equal counts


def decide(prompt: DecisionPrompt) -> str:
    """Applies the domain's policy to the facts of the view alone; generic vote for other domains."""
    task: TaskSpec = prompt.task
    view = parse_view(prompt.view).view
    rules = rules_for(task.domain)
    if rules is not None:
        values = extract_fields(rules.fields, [(max(f.citations, default=0), f.text) for f in view.facts])
        verdict = refer_if_unverified(rules.verdict(values, task.task), task.label_space)
        if verdict.label in task.label_space:
            stated = "; ".join(
                f"{s.label} {values[s.key].text} [{values[s.key].index}]" for s in rules.fields if s.key in values
            )
            memo = (
                " ".join((*(f"{r}." for r in verdict.reasons), *verdict.findings)) or "No policy finding was possible."
            )
            rationale = f"{memo} Facts relied on: {stated or 'none'}."
            notice = "none"
            if is_negative(verdict.label) or verdict.label in rules.negative_labels:
                refs = ", ".join(p.ref for p in rules.provisions_for(verdict.label))
                notice = f"Principal reasons: {'; '.join(verdict.reasons) or 'see rationale'}. Under {refs}."
            return render_decision(verdict.label, rationale, notice)
    label = _vote(prompt.view, task.label_space)
    notice = "Principal reasons: as stated in the memory view." if is_negative(label) else "none"
    return render_decision(label, f"Label named most often in the memory view: {label}.", notice)
