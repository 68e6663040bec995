"""Side-by-side comparison of DPM and Summ-only decisions made on the same triggers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from pipeline.core.task import Architecture
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.trigger import DecisionKey, DecisionRequest


@dataclass(frozen=True)
class ArchSummary:
    """Per-architecture figures over the compared triggers."""

    architecture: Architecture
    decisions: int
    accuracy: float | None
    labelled: int
    mean_calls: float
    mean_tokens: float
    mean_latency_s: float
    total_cost_usd: float
    failures: int


@dataclass(frozen=True)
class Comparison:
    pairs: int
    agreement: float | None
    per_arch: tuple[ArchSummary, ...]


def _trigger(record: DecisionRecord) -> tuple[str, str]:
    return record.case.tenant, record.decision_id.trigger_id


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0


def _summary(
    arch: Architecture, records: Sequence[DecisionRecord], labels: Mapping[tuple[str, str], str]
) -> ArchSummary:
    labelled = [(r, labels[_trigger(r)]) for r in records if _trigger(r) in labels]
    correct = sum(1 for r, label in labelled if r.outcome.label == label)
    return ArchSummary(
        architecture=arch,
        decisions=len(records),
        accuracy=correct / len(labelled) if labelled else None,
        labelled=len(labelled),
        mean_calls=_mean([r.llm_calls for r in records]),
        mean_tokens=_mean([r.total_tokens for r in records]),
        mean_latency_s=_mean([r.latency_s for r in records]),
        total_cost_usd=sum(r.cost_usd for r in records),
        failures=sum(1 for r in records if r.outcome.label is None),
    )


def compare(
    decisions: Mapping[DecisionKey, DecisionRecord], triggers: Mapping[tuple[str, str], DecisionRequest]
) -> Comparison:
    """Agreement over triggers decided by both architectures; accuracy where the trigger carried a label.

    A trigger is its tenant's: two tenants' triggers with one id are two triggers.
    """
    by_trigger: dict[tuple[str, str], dict[Architecture, DecisionRecord]] = {}
    for key, record in decisions.items():
        by_trigger.setdefault((key.tenant, key.decision_id.trigger_id), {})[key.decision_id.architecture] = record
    both = [archs for archs in by_trigger.values() if set(Architecture) <= set(archs)]
    agree = sum(1 for archs in both if archs[Architecture.DPM].outcome.label == archs[Architecture.SUMM].outcome.label)
    labels = {t: r.label for t, r in triggers.items() if r.label}
    per_arch = tuple(_summary(arch, [archs[arch] for archs in both], labels) for arch in Architecture)
    return Comparison(len(both), agree / len(both) if both else None, per_arch)
