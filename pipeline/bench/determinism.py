"""The determinism study: R replays per case, unique view hashes and edit distances to the first run."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from pipeline.bench.evaluate import run_in_process
from pipeline.core.case import Case
from pipeline.core.hashing import text_digest
from pipeline.core.model import ModelBackend
from pipeline.core.prompt import PromptLayout
from pipeline.core.task import Architecture, Budget
from pipeline.core.verification import view_distances


def determinism_study(
    cases: Sequence[Case],
    budgets: dict[str, Budget],
    archs: Sequence[Architecture],
    backend: ModelBackend,
    replays: int,
    *,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> dict[str, Any]:
    """Per arch: unique SHA-256 counts per case and mean/max normalized edit distances (whole, 200-char prefix)."""
    study: dict[str, Any] = {"replays": replays, "backend": backend.name, "model": backend.model, "archs": {}}
    for arch in archs:
        per_case: list[dict[str, Any]] = []
        for case in cases:
            views = [run_in_process(case, arch, budgets[case.ref.key], backend, layout=layout).view_text
                     for _ in range(replays)]  # fmt: skip
            distances = [view_distances(views[0], other) for other in views[1:]] or [(0.0, 0.0)]
            per_case.append({
                "case_id": case.ref.case_id,
                "unique_sha256": len({text_digest(v) for v in views}),
                "max_distance": max(d[0] for d in distances),
                "max_prefix_distance": max(d[1] for d in distances),
            })  # fmt: skip
        study["archs"][arch.value] = {
            "cases": per_case,
            "mean_unique_sha256": fmean(c["unique_sha256"] for c in per_case),
            "mean_max_distance": fmean(c["max_distance"] for c in per_case),
            "mean_max_prefix_distance": fmean(c["max_prefix_distance"] for c in per_case),
            "byte_identical_cases": sum(1 for c in per_case if c["unique_sha256"] == 1),
        }
    return study
