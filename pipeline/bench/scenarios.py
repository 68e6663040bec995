"""Per-domain scenarios built by inversion: the label first, then field values that imply it.

Each scenario returns the field values (as documents print them), which fields were amended
later (with the superseded value), and the sentences that state each field. The policy in the
domain's rule table must give the chosen label for the final values; the generator checks it.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from pipeline.bench import filler
from pipeline.bench.draft import Draft
from pipeline.core.anchors import AnchorKind, extract_anchors
from pipeline.core.domains.base import money


@dataclass
class Scenario:
    """Final field values, superseded earlier values, statement templates and near-miss decoys."""

    values: dict[str, str]
    earlier: dict[str, str] = field(default_factory=dict)
    templates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    corrections: dict[str, str] = field(default_factory=dict)
    decoys: list[str] = field(default_factory=list)
    interim: dict[str, str] = field(default_factory=dict)  # a second, also superseded value (hard mode)


def _date(rng: random.Random, start: dt.date, span_days: int) -> dt.date:
    return start + dt.timedelta(days=rng.randrange(span_days))


def _round(value: float, step: int) -> Decimal:
    return Decimal(round(value / step) * step)


def loan(rng: random.Random, label: str) -> Scenario:
    """DENY breaks one or two of score >= 620, DTI <= 43%, LTV <= 95%; APPROVE meets all with margin."""
    failing = set(rng.sample(["score", "dti", "ltv"], rng.choice([1, 1, 2]))) if label == "DENY" else set()
    score = rng.randint(560, 612) if "score" in failing else rng.randint(640, 805)
    income = _round(rng.uniform(6500, 16000), 50)
    dti = rng.uniform(44.5, 55) if "dti" in failing else rng.uniform(24, 41.5)
    debt = _round(float(income) * dti / 100, 5)
    appraised = _round(rng.uniform(250_000, 850_000), 1000)
    ltv = rng.uniform(96.5, 104) if "ltv" in failing else rng.uniform(60, 93)
    loan_amount = _round(float(appraised) * ltv / 100, 500)
    app_date = _date(rng, dt.date(2026, 1, 5), 200)
    scenario = Scenario(
        values={
            "application_id": f"LN-{app_date.year}-{rng.randint(1000, 999_999):06d}",
            "loan_amount": money(loan_amount),
            "appraised_value": money(appraised),
            "gross_monthly_income": money(income),
            "monthly_debt": money(debt),
            "credit_score": str(score),
            "application_date": app_date.isoformat(),
        },
        templates={
            "application_id": (
                "Application number {v} has been assigned to this file.",
                "Uniform Residential Loan Application received; application number {v}.",
            ),
            "loan_amount": (
                "The requested loan amount is {v} for a 30-year fixed-rate purchase.",
                "Borrower requests a loan amount of {v}; the purchase contract is attached.",
            ),
            "appraised_value": (
                "Appraisal report received: appraised value {v}, supported by three comparable sales.",
            ),
            "gross_monthly_income": (
                "Written verification of employment: gross monthly income {v}.",
                "Income worksheet: gross monthly income of {v} from base salary.",
            ),
            "monthly_debt": (
                "Liabilities reviewed: total monthly debt obligations {v}, including the proposed housing payment.",
            ),
            "credit_score": (
                "Tri-merge credit report: representative credit score {v}.",
                "Credit report pulled; credit score {v} (middle of three bureau scores).",
            ),
            "application_date": ("Application date {v}; the Loan Estimate was issued within three business days.",),
        },
        decoys=[
            "Program guidelines: a minimum credit score of 620 and a maximum debt-to-income ratio of 43% apply.",
            "For reference, the prior loan amount on the borrower's previous home was "
            f"{money(_round(float(loan_amount) * 0.7, 500))}.",
            f"The average appraised value in the census tract is {money(_round(float(appraised) * 0.9, 1000))}.",
        ],
    )
    if rng.random() < 0.6:  # an amended figure: only the later one is right
        key = rng.choice(["gross_monthly_income", "appraised_value"])
        old = income * Decimal("1.08") if key == "gross_monthly_income" else appraised * Decimal("1.05")
        scenario.earlier[key] = money(_round(float(old), 50 if key == "gross_monthly_income" else 1000))
        scenario.corrections[key] = (
            "Corrected income calculation after paystub review: gross monthly income {v}; overtime without a "
            "two-year history is excluded."
            if key == "gross_monthly_income"
            else "Amended appraisal after reconsideration of value: appraised value {v}."
        )
    return scenario


def claim(rng: random.Random, label: str) -> Scenario:
    """DENY: loss outside the period or an excluded peril; PARTIAL PAY: payable below the claim; PAY: in full."""
    effective = _date(rng, dt.date(2025, 1, 1), 300)
    expiration = effective + dt.timedelta(days=364)
    reason = rng.choice(["period", "peril"]) if label == "DENY" else ""
    loss = (
        expiration + dt.timedelta(days=rng.randint(3, 60))
        if reason == "period"
        else effective + dt.timedelta(days=rng.randint(20, 340))
    )
    peril = (
        rng.choice(["flood", "earthquake", "wear and tear"])
        if reason == "peril"
        else rng.choice(["fire", "windstorm", "hail", "theft", "burst pipe"])
    )
    limit = _round(rng.uniform(150_000, 600_000), 5000)
    deductible = Decimal(rng.choice([500, 1000, 2500, 5000]))
    assessed = _round(rng.uniform(8_000, 90_000), 50)
    claimed = (
        assessed - deductible - _round(rng.uniform(0, 2000), 50)
        if label in ("PAY", "DENY")
        else assessed - deductible + _round(rng.uniform(3_000, 25_000), 50)
    )
    return Scenario(
        values={
            "policy_number": f"HO-{rng.randint(100_000, 999_999)}-{rng.randint(10, 99)}",
            "claim_number": f"CLM-{loss.year}-{rng.randint(10_000, 99_999)}",
            "date_of_loss": loss.isoformat(),
            "effective_date": effective.isoformat(),
            "expiration_date": expiration.isoformat(),
            "cause_of_loss": peril,
            "coverage_limit": money(limit),
            "deductible": money(deductible),
            "claimed_amount": money(claimed),
            "assessed_damage": money(assessed),
        },
        templates={
            "policy_number": ("Declarations page for policy number {v}.",),
            "claim_number": ("First notice of loss recorded under claim number {v}.",),
            "date_of_loss": ("The insured reports the date of loss as {v}.",),
            "effective_date": ("Policy effective date {v}.",),
            "expiration_date": ("Policy expiration date {v}.",),
            "cause_of_loss": ("Field inspection: cause of loss determined to be {v}.",),
            "coverage_limit": ("Dwelling coverage limit {v} per the declarations.",),
            "deductible": ("All-peril deductible {v} applies per occurrence.",),
            "claimed_amount": ("Proof of loss submitted: claimed amount {v}.",),
            "assessed_damage": ("Adjuster's estimate complete: assessed damage {v} for repairs.",),
        },
        corrections={"assessed_damage": "Supplemental inspection revised the figure: assessed damage {v}."},
        earlier={"assessed_damage": money(assessed + _round(rng.uniform(1_500, 6_000), 50))}
        if rng.random() < 0.5
        else {},
        decoys=[
            f"A prior claim in 2021 had an assessed damage of {money(_round(float(assessed) * 0.4, 50))}, closed.",
            f"The typical deductible for this program is {money(Decimal(1000))}; the declarations state the actual.",
        ],
    )


def prior_auth(rng: random.Random, label: str) -> Scenario:
    """APPROVE: a deficit, or >= 6 weeks of symptoms and therapy; DENY: no deficit and a short course."""
    deficit = "present" if label == "APPROVE" and rng.random() < 0.35 else "absent"
    short = label == "DENY"
    symptoms = rng.randint(2, 5) if short and rng.random() < 0.5 else rng.randint(7, 26)
    therapy = rng.randint(1, 5) if short and symptoms >= 6 else (rng.randint(0, 5) if short else rng.randint(6, 14))
    request = _date(rng, dt.date(2026, 2, 1), 200)
    return Scenario(
        values={
            "member_id": f"MBR-{rng.randint(10_000_000, 99_999_999)}",
            "cpt_code": "72148",
            "diagnosis_code": rng.choice(["M54.16", "M51.26", "M54.5", "M48.06"]),
            "request_date": request.isoformat(),
            "symptom_weeks": str(symptoms),
            "therapy_weeks": str(therapy),
            "neuro_deficit": deficit,
        },
        templates={
            "member_id": ("Prior authorization request for member ID {v}.",),
            "cpt_code": ("Requested service: MRI lumbar spine without contrast, CPT {v}.",),
            "diagnosis_code": ("Primary diagnosis code {v} documented by the ordering physician.",),
            "request_date": ("Request date {v}; standard review timeframe applies.",),
            "symptom_weeks": (
                "History: symptom duration {v} weeks of low back pain radiating to the leg.",
                "Chief complaint: low back pain radiating to the left leg for {v} weeks.",
                "Duration of symptoms: {v} weeks; onset after lifting at work.",
            ),
            "therapy_weeks": (
                "Physical therapy notes: conservative therapy completed for {v} weeks.",
                "Patient has completed {v} weeks of physical therapy and home exercise without relief.",
                "Conservative management to date: NSAIDs and supervised PT x {v} weeks.",
            ),
            "neuro_deficit": (
                "Neurological examination: neurological deficit {v}.",
                "Neuro exam: focal motor or sensory deficit {v}; reflexes documented.",
            ),
        },
        corrections={"therapy_weeks": "Updated therapy log received: conservative therapy now totals {v} weeks."},
        earlier={"therapy_weeks": str(max(0, therapy - rng.randint(1, 3)))} if rng.random() < 0.5 else {},
        decoys=[
            "Medical policy: a minimum conservative therapy of 6 weeks is required unless red flags are documented.",
            "The previous MRI request in 2023 listed symptom duration of 3 weeks and was withdrawn.",
        ],
    )


def tax_exam(rng: random.Random, label: str) -> Scenario:
    """ADJUST: unreported income or unsubstantiated deductions over $1,000; NO CHANGE: both within it."""
    kind = rng.choice(["income", "deductions", "both"]) if label == "ADJUST" else ""
    reported = _round(rng.uniform(45_000, 240_000), 10)
    gap = _round(rng.uniform(1_500, 25_000), 10) if kind in ("income", "both") else _round(rng.uniform(0, 900), 10)
    claimed = _round(rng.uniform(8_000, 45_000), 10)
    disallowed = (
        _round(rng.uniform(1_500, 12_000), 10) if kind in ("deductions", "both") else _round(rng.uniform(0, 900), 10)
    )
    year = rng.choice([2022, 2023, 2024])
    return Scenario(
        values={
            "taxpayer_id": f"TP-{rng.randint(100, 999)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}",
            "tax_year": str(year),
            "reported_income": money(reported),
            "information_return_income": money(reported + gap),
            "claimed_deductions": money(claimed),
            "substantiated_deductions": money(claimed - disallowed),
        },
        templates={
            "taxpayer_id": ("Examination opened for taxpayer ID {v}.",),
            "tax_year": ("The examination covers tax year {v}.",),
            "reported_income": (
                "Form 1040 as filed: reported total income {v}.",
                "Return as filed shows total income of {v} on line 9.",
            ),
            "information_return_income": (
                "IRP transcript: information returns show {v} in wages and 1099 income.",
                "AUR match: W-2 and 1099 forms filed by payers total {v}.",
            ),
            "claimed_deductions": (
                "Schedule A and C review: claimed deductions {v}.",
                "Total deductions per return: {v} (itemized and business expenses).",
            ),
            "substantiated_deductions": (
                "After document review, substantiated deductions total {v}.",
                "Examiner allowed deductions of {v} after reviewing receipts and logs.",
            ),
        },
        corrections={"substantiated_deductions": "Additional receipts accepted: substantiated deductions {v}."},
        earlier={"substantiated_deductions": money(claimed - disallowed - _round(rng.uniform(500, 3000), 10))}
        if rng.random() < 0.5
        else {},
        decoys=[
            "The accuracy-related penalty threshold is a substantial understatement exceeding $5,000.",
            f"The prior year return reported total income of {money(reported * Decimal('0.93'))}.",
        ],
    )


# Near-miss figures a careful reader keeps out: thresholds, other people's and superseded numbers.
_HARD_DECOYS: dict[str, tuple[str, ...]] = {
    "loan": (
        "Another applicant on a separate file reviewed the same day had a credit score of {credit_score-40}.",
        "Pre-approval worksheet, superseded: gross monthly income {gross_monthly_income*1.15}.",
        "Program guidelines cap the loan-to-value at 95% and the debt-to-income ratio at 43%.",
        "The seller's previous listing price was {appraised_value*1.1}; the appraisal governs.",
        "Typical total monthly debt for this program is {monthly_debt*0.8}.",
    ),
    "claim": (
        "The neighbouring property's claim for the same storm was assessed at {assessed_damage*1.3}.",
        "The prior policy term carried a deductible of {deductible*2}.",
        "Program maximum coverage limit is $1,000,000 for this policy form.",
        "For reference, the claimed amount on an unrelated 2022 claim was {claimed_amount*0.6}.",
    ),
    "prior_auth": (
        "Medical policy: at least 6 weeks of conservative therapy are required before imaging.",
        "A previous request for a different member listed conservative therapy of {therapy_weeks+4} weeks.",
        "Guideline example: symptom duration of 12 weeks with failed therapy.",
        "The prior MRI request in 2024 documented neurological deficit present and was approved.",
    ),
    "tax_exam": (
        "Another taxpayer's return in the same batch claimed deductions of {claimed_deductions*1.4}.",
        "The average substantiated deductions in this audit class are {substantiated_deductions*0.7}.",
        "The prior year return reported total income of {reported_income*0.9} (not under examination).",
        "Threshold for referral: unreported income exceeding $1,000.",
    ),
}
# Wordings only hard cases use (the default cases keep their bytes): tables, verbs, counts first.
_HARD_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "loan": {"credit_score": ("Qualifying score per the tri-merge: {v}.",)},
    "claim": {
        "date_of_loss": ("The homeowner says the damage happened on {v}.",),
        "claimed_amount": ("The policyholder seeks {v} under the dwelling coverage.",),
        "cause_of_loss": ("Inspection findings: {v} damage confirmed at the rear elevation.",),
    },
    "prior_auth": {
        "therapy_weeks": ("Completed {v} weeks of supervised PT; no lasting relief.",),
        "symptom_weeks": ("Symptoms began {v} weeks before the request.",),
    },
    "tax_exam": {
        "reported_income": ("Account transcript\n| Line | Item | Amount |\n|---|---|---|\n| 9 | Total income | {v} |",)
    },
}
_AMENDABLE = {
    "loan": ("gross_monthly_income", "appraised_value"),
    "claim": ("assessed_damage",),
    "prior_auth": ("therapy_weeks",),
    "tax_exam": ("substantiated_deductions",),
}
_CORRECTIONS = {
    "gross_monthly_income": "Corrected income calculation after paystub review: gross monthly income {v}; overtime "
    "without a two-year history is excluded.",
    "appraised_value": "Amended appraisal after reconsideration of value: appraised value {v}.",
    "assessed_damage": "Supplemental inspection revised the figure: assessed damage {v}.",
    "therapy_weeks": "Updated therapy log received: conservative therapy now totals {v} weeks.",
    "substantiated_deductions": "Additional receipts accepted: substantiated deductions {v}.",
}


def _shifted(rng: random.Random, text: str) -> str:
    """Another plausible value of the same kind: an amount 4-12% off, a count 1-3 off."""
    anchor = extract_anchors(text)[0]
    if anchor.kind is AnchorKind.MONEY:
        factor = 1 + rng.choice([-1, 1]) * rng.uniform(0.04, 0.12)
        return money(_round(float(anchor.value) * factor, 50))
    return str(max(0, int(anchor.value) + rng.choice([-3, -2, -1, 1, 2, 3])))


def _decoy(template: str, values: dict[str, str]) -> str:
    """A decoy template with `{key*factor}` or `{key+delta}` filled from the case's own values."""

    def fill(match: re.Match[str]) -> str:
        key, op, operand = match.groups()
        number = Decimal(extract_anchors(values[key])[0].value)
        if op == "*":
            return money(_round(float(number * Decimal(operand)), 50))
        return str(int(number + Decimal(op + operand)))

    return re.sub(r"\{(\w+)([*+-])([\d.]+)\}", fill, template)


def harden(rng: random.Random, domain: str, scenario: Scenario) -> Scenario:
    """The hard mode: every amendable figure amended twice, and many more near-miss decoys."""
    for key in _AMENDABLE[domain]:
        final = scenario.values[key]
        scenario.earlier.setdefault(key, _shifted(rng, final))
        scenario.corrections.setdefault(key, _CORRECTIONS[key])
        scenario.interim[key] = _shifted(rng, final)
    scenario.decoys.extend(_decoy(t, scenario.values) for t in _HARD_DECOYS[domain])
    for key, wordings in _HARD_TEMPLATES[domain].items():
        scenario.templates[key] = scenario.templates[key] + wordings
    return scenario


def _core_events(rng: random.Random, scenario: Scenario) -> list[tuple[str, str]]:
    """Field statements (earlier values first, corrections later) and decoys, in a plausible order."""
    statements = []
    for key, value in scenario.values.items():
        template = rng.choice(scenario.templates[key])
        if key in scenario.earlier:
            statements.append(("document", template.format(v=scenario.earlier[key])))
            if key in scenario.interim:
                statements.append(("amendment", scenario.corrections[key].format(v=scenario.interim[key])))
            statements.append(("amendment", scenario.corrections[key].format(v=value)))
        else:
            statements.append(("document", template.format(v=value)))
    return statements + [("guidance", d) for d in scenario.decoys]


def label_space(domain: str) -> tuple[str, ...] | None:
    """The forms voice decides over each domain's own label space."""
    del domain
    return None


def draft(rng: random.Random, domain: str, label: str, hard: bool) -> Draft:
    """A forms-voice case: one templated sentence a figure, corrections later, decoys among them."""
    scenario = SCENARIOS[domain](rng, label)
    if hard:
        scenario = harden(rng, domain, scenario)
    return Draft(values=scenario.values, documents=_core_events(rng, scenario))


def injection(rng: random.Random, domain: str, case: Draft) -> str:
    """The forms voice's planted instruction, carrying a fake figure."""
    fake = str(int(case.values.get("credit_score", "700")) + 150) if domain == "loan" else "$999,999"
    return filler.injection(rng, fake)


SCENARIOS: dict[str, Callable[[random.Random, str], Scenario]] = {
    "loan": loan, "claim": claim, "prior_auth": prior_auth, "tax_exam": tax_exam,
}  # fmt: skip
