"""The four scoring axes: FRP, EDA (exact), RCS and CRR (by a judge), over a decision's output."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from pipeline.core.anchors import extract_anchors, mentions_value
from pipeline.core.case import Case
from pipeline.core.decision import match_label

_WORD = re.compile(r"[a-z][a-z-]{3,}")


@dataclass(frozen=True)
class JudgeScores:
    """Reasoning coherence (RCS) and compliance reconstruction (CRR), each in [0, 1]."""

    rcs: float
    crr: float


class Judge(Protocol):
    """Grades reasoning and compliance of a decision's output against the case's keys."""

    @property
    def name(self) -> str:
        """Judge id recorded with the scores."""
        ...

    def grade(self, case: Case, output: str) -> JudgeScores:
        """Scores in [0, 1]; raises ModelBackendError when an LLM judge cannot answer."""
        ...


def frp(case: Case, output: str) -> float:
    """Factual recall precision: required anchors stated in the output, by value, never inside other numbers."""
    if not case.required_anchors:
        return 1.0
    return sum(1 for a in case.required_anchors if mentions_value(output, a.value)) / len(case.required_anchors)


def eda(case: Case, label: str | None) -> float:
    """1.0 when the decided label is exactly the case's label (PAY never matches PARTIAL PAY)."""
    return 1.0 if label is not None and match_label(label, (case.label,)) == case.label else 0.0


def _normalize_ref(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def provision_mentioned(output: str, ref: str) -> bool:
    """True when a provision reference ("12 CFR 1002.9", "FCRA 615(a)") appears, spacing and punctuation aside."""
    return _normalize_ref(ref) in _normalize_ref(output)


def point_covered(output: str, point: str) -> bool:
    """A reasoning point is covered when all its anchors appear by value and most of its words appear."""
    anchors = extract_anchors(point)
    if not all(mentions_value(output, a.text) for a in anchors):
        return False
    words = set(_WORD.findall(point.lower()))
    present = set(_WORD.findall(output.lower()))
    return not words or len(words & present) / len(words) >= 0.5


class KeywordJudge:
    """The deterministic offline judge: coverage of the case's reasoning points and provisions."""

    @property
    def name(self) -> str:
        return "keyword"

    def grade(self, case: Case, output: str) -> JudgeScores:
        points = case.reasoning_points
        provisions = case.compliance_provisions
        rcs = sum(point_covered(output, p) for p in points) / len(points) if points else 1.0
        crr = sum(provision_mentioned(output, p) for p in provisions) / len(provisions) if provisions else 1.0
        return JudgeScores(rcs, crr)
