"""Side-by-side comparison of DPM and Summ-only decisions made on the same triggers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import fmean
from typing import Any


@dataclass(frozen=True)
class ArchSummary:
    """Per-architecture figures over the compared triggers."""

    architecture: str
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


def _summary(arch: str, records: list[Mapping[str, Any]], labels: Mapping[str, str]) -> ArchSummary:
    labelled = [(r, labels[r["decision_id"].rsplit(":", 1)[0]]) for r in records
                if r["decision_id"].rsplit(":", 1)[0] in labels]  # fmt: skip
    correct = sum(1 for r, label in labelled if r["decision"]["label"] == label)
    return ArchSummary(
        architecture=arch,
        decisions=len(records),
        accuracy=correct / len(labelled) if labelled else None,
        labelled=len(labelled),
        mean_calls=fmean(r["llm_calls"] for r in records) if records else 0.0,
        mean_tokens=fmean(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in records)
        if records
        else 0.0,
        mean_latency_s=fmean(r["latency_s"] for r in records) if records else 0.0,
        total_cost_usd=sum(r["cost_usd"] for r in records),
        failures=sum(1 for r in records if r["decision"]["label"] is None),
    )


def compare(decisions: Mapping[str, Mapping[str, Any]], triggers: Mapping[str, Mapping[str, Any]]) -> Comparison:
    """Agreement over triggers decided by both architectures; accuracy where the trigger carried a label."""
    by_trigger: dict[str, dict[str, Mapping[str, Any]]] = {}
    for decision_id, record in decisions.items():
        trigger_id, arch = decision_id.rsplit(":", 1)
        by_trigger.setdefault(trigger_id, {})[arch] = record
    both = {t: archs for t, archs in by_trigger.items() if {"dpm", "summ"} <= set(archs)}
    agree = sum(1 for archs in both.values() if archs["dpm"]["decision"]["label"] == archs["summ"]["decision"]["label"])
    labels = {t: str(v["label"]) for t, v in triggers.items() if v.get("label")}
    per_arch = tuple(_summary(arch, [archs[arch] for archs in both.values()], labels) for arch in ("dpm", "summ"))
    return Comparison(len(both), agree / len(both) if both else None, per_arch)
