"""Property insurance claims adjudication under unfair claims settlement practices rules."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import Applies, Checks, DomainRules, Provision, Verdict, money
from pipeline.core.fields import FieldSpec, FieldValue

COVERED_PERILS = ("fire", "lightning", "windstorm", "wind", "hail", "theft", "burglary", "vandalism", "burst pipe",
                  "frozen pipe", "smoke")  # fmt: skip
EXCLUDED_PERILS = ("flood", "surface water", "earthquake", "earth movement", "wear and tear", "mold", "neglect",
                   "deterioration")  # fmt: skip

FIELDS = (
    FieldSpec("policy_number", "Policy number", (r"policy (?:number|no\.?)", r"pol(?:icy)? #"), AnchorKind.IDENT),
    FieldSpec("claim_number", "Claim number", (r"claim (?:number|no\.?)",), AnchorKind.IDENT),
    FieldSpec(
        "date_of_loss",
        "Date of loss",
        (r"date of loss", r"DOL", r"loss date", r"loss occurred on", r"(?:damage |it |loss )?(?:happened|occurred) on"),
        AnchorKind.DATE,
        weight=2,
    ),
    FieldSpec(
        "effective_date",
        "Policy effective date",
        (
            r"effective date",
            r"coverage (?:begins|began)",
            r"policy (?:period|term)(?: from)?",
            r"in force from",
            r"term",
        ),
        AnchorKind.DATE,
    ),
    FieldSpec(
        "expiration_date",
        "Policy expiration date",
        (
            r"expiration date",
            r"coverage (?:ends|ended)",
            r"expir(?:es|y)(?: on)?",
            r"policy (?:period|term)[^.;\n]{0,40}?\b(?:to|through|until)",
            r"term [^;\n]{0,30}?(?:\bto|\bthrough|\buntil|\d(?= - \d))",  # "term 5/17/2024 - 5/17/2025"
        ),
        AnchorKind.DATE,
    ),
    FieldSpec(
        "cause_of_loss",
        "Cause of loss",
        # The peril named right after the loss is reported counts too: "DOL 2025-07-14, hail damage".
        (
            r"cause of loss",
            r"loss was caused by",
            r"peril",
            r"caused by",
            r"damage from",
            r"(?:inspection )?findings",
            r"fnol",
            r"inspected",
            r"(?:first )?notice of loss",
            r"DOL",
            r"loss date",
            r"date of loss",
        ),
        None,
        vocabulary=EXCLUDED_PERILS + COVERED_PERILS,
        weight=2,
    ),
    FieldSpec(
        "coverage_limit",
        "Coverage limit",
        (r"coverage limit", r"dwelling limit", r"limit of liability", r"cov(?:erage|\.)? A(?: limit)?"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec("deductible", "Deductible", (r"deductible", r"ded"), AnchorKind.MONEY, weight=2),
    FieldSpec(
        "claimed_amount",
        "Claimed amount",
        (
            r"claimed amount",
            r"amount claimed",
            r"claim amount",
            r"proof of loss(?: for| of)?",
            r"(?:insured|insd|policyholder|claimant|homeowner)s? (?:is )?(?:claims|claiming|seeks|requests|asks for)",
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "assessed_damage",
        "Assessed damage",
        (
            r"assessed damage",
            r"adjuster'?s? estimate",
            r"estimated? (?:cost of )?repairs?",
            r"repair estimate",
            r"actual cash value",
            r"ACV",
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
)


def _coverage(checks: Checks, values: Mapping[str, FieldValue]) -> None:
    keys = ("date_of_loss", "effective_date", "expiration_date")
    if any(k not in values for k in keys):
        checks.missing(*keys)
        return
    loss, start, end = (values[k].value for k in keys)  # ISO dates compare as strings
    span = f"{checks.text('effective_date')} to {checks.text('expiration_date')}"
    if not start <= loss <= end:
        checks.reasons.append(f"Date of loss {checks.text('date_of_loss')} is outside the policy period {span}")
    else:
        checks.findings.append(f"Date of loss {checks.text('date_of_loss')} is within the policy period {span}.")
    cause = values.get("cause_of_loss")
    if cause is None:
        checks.unverifiable("cause of loss")
    elif cause.value in EXCLUDED_PERILS:
        checks.reasons.append(f"Cause of loss ({cause.text}) is excluded by the policy")
    else:
        checks.findings.append(f"Cause of loss ({cause.text}) is a covered peril.")


def policy(values: Mapping[str, FieldValue], limits: Mapping[str, Decimal] | None = None) -> Verdict:
    """DENY outside the period, for an excluded peril or nothing payable; PAY in full or PARTIAL PAY otherwise.

    The policy's own period, limit and deductible decide: a claims task states no thresholds of its own.
    """
    del limits
    checks = Checks(values)
    _coverage(checks, values)
    amounts = ("assessed_damage", "coverage_limit", "deductible", "claimed_amount")
    if checks.missing(*amounts) or checks.reasons:
        return checks.verdict("PAY", "DENY")
    assessed, limit, deductible, claimed = (values[k].number or Decimal(0) for k in amounts)
    payable = min(assessed, limit) - deductible
    checks.findings.append(
        f"Payable = min(assessed {checks.text('assessed_damage')}, limit {checks.text('coverage_limit')}) "
        f"- deductible {checks.text('deductible')} = {money(payable)} against {checks.text('claimed_amount')} claimed."
    )
    if payable <= 0:
        checks.reasons.append(f"Assessed damage {checks.text('assessed_damage')} does not exceed the deductible")
        return checks.verdict("PAY", "DENY")
    if payable >= claimed:
        return Verdict("PAY", (), tuple(checks.findings))
    claimed_text = checks.text("claimed_amount")
    shortfall = f"Payable {money(payable)} after the limit and deductible is less than the {claimed_text} claimed"
    return Verdict("PARTIAL PAY", (shortfall,), tuple(checks.findings))


RULES = DomainRules(
    domain="claim",
    title="insurance claims adjudication",
    label_space=("PAY", "PARTIAL PAY", "DENY"),
    task="Adjudicate this property insurance claim: PAY in full, PARTIAL PAY, or DENY, applying the policy "
    "period, exclusions, coverage limit and deductible.",
    fields=FIELDS,
    keywords=("policy", "claim", "loss", "damage", "coverage", "deductible", "adjuster", "exclusion", "estimate"),
    provisions=(
        Provision(
            "NAIC Model 900",
            "Unfair Claims Settlement Practices (NAIC Model 900): prompt, fair "
            "investigation and a reasonable explanation of the basis for the decision.",
        ),
        Provision(
            "policy exclusions",
            "Policy exclusions and conditions: a denial cites the specific policy provision relied on.",
            Applies.NEGATIVE,
        ),
        Provision("declarations page", "Declarations page: coverage limit and deductible applied as stated."),
    ),
    policy=policy,
    negative_labels=("DENY", "PARTIAL PAY"),
    reasons_heading="Reasons for the claim determination, as the claims letter states them",
)
