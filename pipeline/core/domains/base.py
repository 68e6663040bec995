"""What a domain's rule table holds: fields, relevance terms, provisions and its decision policy."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum
from typing import Protocol

from pipeline.core.fields import FieldSpec, FieldValue


class Applies(StrEnum):
    """When a compliance provision is implicated."""

    ALWAYS = "always"
    NEGATIVE = "negative"
    POSITIVE = "positive"


@dataclass(frozen=True)
class Provision:
    """A regulatory provision: a short reference (what scoring looks for) and the note written."""

    ref: str
    note: str
    applies: Applies = Applies.ALWAYS


UNVERIFIED = "Could not verify from the file: "


@dataclass(frozen=True)
class Verdict:
    """A policy's outcome: the label, principal reasons (for a notice) and the findings behind it.

    `unverified` names the decisive criteria the file gave no evidence for: a decision that rests
    on missing evidence, not on a failed criterion, is referred where the label space allows it.
    """

    label: str
    reasons: tuple[str, ...]
    findings: tuple[str, ...]
    unverified: tuple[str, ...] = ()

    @property
    def rests_on_missing_evidence(self) -> bool:
        """True when the only reasons against are criteria without evidence, none that failed."""
        return bool(self.unverified) and all(r.startswith(UNVERIFIED) for r in self.reasons)


@dataclass(frozen=True)
class Limit:
    """A decision threshold: the domain's standard value, and the ways a task text states another one."""

    key: str
    default: Decimal
    patterns: tuple[str, ...]  # regular expressions whose first group is the number as the task writes it

    def read(self, task_text: str) -> Decimal:
        """The value the task states (the first pattern that matches), else the standard one."""
        for pattern in self.patterns:
            match = re.search(pattern, task_text, re.IGNORECASE)
            if match:
                return Decimal(match.group(1).replace(",", ""))
        return self.default


_AT_LEAST = r"(?:at least|no (?:less|lower) than|minimum(?: of)?|min\.?|floor of|at or above|>=|≥)"
_AT_MOST = (r"(?:at most|no (?:more|higher|greater) than|not (?:to )?exceed(?:ing)?|up to|maximum(?: of)?|max\.?|"
            r"cap(?:ped)? (?:of|at)|ceiling of|at or below|<=|≤)")  # fmt: skip
_AFTER_MIN = r"(?:minimum|min\.?|or (?:higher|more|above|better)|floor)"
_AFTER_MAX = r"(?:maximum|max\.?|or (?:less|lower|below)|cap)"
_GAP = r"[^.;\n\d]{0,30}?"  # a few words between, never a number or the end of a clause


def threshold(key: str, default: Decimal, term: str, number: str, *, at_least: bool) -> Limit:
    """A limit as tasks word it, in any of three orders.

    "DTI no higher than 45%", "maximum DTI 45%", "DTI 45% maximum", and the same with at-least
    words for a minimum. `number` is a regular expression with one group.
    """
    before, after = (_AT_LEAST, _AFTER_MIN) if at_least else (_AT_MOST, _AFTER_MAX)
    return Limit(key, default, (
        rf"(?:{term}){_GAP}{before}\s*{number}",
        rf"{before}\s*(?:{term}){_GAP}{number}",
        rf"(?:{term})\s*{number}\s*{after}\b",
    ))  # fmt: skip


class Policy(Protocol):
    def __call__(self, values: Mapping[str, FieldValue], limits: Mapping[str, Decimal] | None = None) -> Verdict:
        """The verdict on the field values; `limits` by key, each domain's standard one where absent."""
        ...


# Labels that defer a decision for more evidence, as label spaces name them.
_REFERRAL = re.compile(r"\b(PEND(?:ING)?|REFER(?:RAL|RED)?|REVIEW|INCOMPLETE|MORE INFO(?:RMATION)?|SUSPEND(?:ED)?)\b")


def referral_label(label_space: tuple[str, ...]) -> str | None:
    """The label of the space that defers a decision for more evidence (PEND, REFER, ...), if there is one."""
    return next((label for label in label_space if _REFERRAL.search(label.upper())), None)


def refer_if_unverified(verdict: Verdict, label_space: tuple[str, ...]) -> Verdict:
    """A verdict that rests only on missing evidence becomes a referral, where the label space has one."""
    refer = referral_label(label_space)
    if refer is None or not verdict.rests_on_missing_evidence:
        return verdict
    missing = ", ".join(verdict.unverified)
    reason = f"Referred, not decided: the file gives no evidence of {missing}"
    return Verdict(refer, (reason,), verdict.findings, verdict.unverified)


@dataclass(frozen=True)
class DomainRules:
    """A domain's rule table."""

    domain: str
    title: str
    label_space: tuple[str, ...]
    task: str
    fields: tuple[FieldSpec, ...]
    keywords: tuple[str, ...]
    provisions: tuple[Provision, ...]
    policy: Policy
    negative_labels: tuple[str, ...]
    limits: tuple[Limit, ...] = ()
    # How the notice of an adverse decision (a negative label, or a referral) names its reasons.
    reasons_heading: str = "Principal reasons for the decision"

    def verdict(self, values: Mapping[str, FieldValue], task_text: str = "") -> Verdict:
        """The policy's verdict under the thresholds the task states (the standard ones where it states none)."""
        return self.policy(values, {limit.key: limit.read(task_text) for limit in self.limits})

    def provisions_for(self, label: str | None) -> tuple[Provision, ...]:
        negative = label in self.negative_labels
        return tuple(
            p for p in self.provisions if p.applies is Applies.ALWAYS or (p.applies is Applies.NEGATIVE) == negative
        )


def limit_of(limits: Mapping[str, Decimal] | None, limit: Limit) -> Decimal:
    """A threshold's value in `limits`, or its standard one."""
    return (limits or {}).get(limit.key, limit.default)


def percent(numerator: Decimal, denominator: Decimal) -> Decimal:
    """Numerator / denominator as a percentage with one decimal, half up (how ratios are reported)."""
    return (numerator * 100 / denominator).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def money(value: Decimal) -> str:
    """A dollar amount as documents write it: $1,234 or $1,234.50."""
    quantized = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    text = f"{quantized:,.2f}"
    return f"-${text[1:]}" if text.startswith("-") else f"${text.removesuffix('.00')}"


class Checks:
    """Accumulates findings and reasons while a policy runs."""

    def __init__(self, values: Mapping[str, FieldValue]) -> None:
        self.values = values
        self.findings: list[str] = []
        self.reasons: list[str] = []
        self.unverified: list[str] = []

    def text(self, key: str) -> str:
        return self.values[key].text

    def missing(self, *keys: str) -> bool:
        """Records a reason when any field is missing or not numeric; True if so."""
        absent = [k.replace("_", " ") for k in keys if k not in self.values or self.values[k].number is None]
        if absent:
            self.unverifiable(*absent)
        return bool(absent)

    def unverifiable(self, *criteria: str) -> None:
        """Records decisive criteria the file gives no evidence for, as a reason and as unverified."""
        self.reasons.append(UNVERIFIED + ", ".join(criteria))
        self.unverified.extend(criteria)

    def number(self, key: str) -> Decimal:
        """A present, numeric field's value (call after `missing` said it is there)."""
        return self.values[key].number or Decimal(0)

    def at_most(self, value: Decimal, limit: Decimal, statement: str, *, too_high: str, within: str) -> None:
        """Records `statement` as a reason when value > limit, else as a finding."""
        if value > limit:
            self.reasons.append(f"{too_high}{statement}, above {within}")
        else:
            self.findings.append(f"{statement}, within {within}.")

    def verdict(self, positive: str, negative: str) -> Verdict:
        label = negative if self.reasons else positive
        return Verdict(label, tuple(self.reasons), tuple(self.findings), tuple(self.unverified))
