"""The `letters` voice: narrative correspondence and memos in full sentences, never tuned against.

Reviewers, adjusters and examiners write to each other and to the applicant in paragraphs:
figures sit inside long sentences, next to other people's and earlier figures, dates are
written out, and the decisive fact is often stated as an outcome ("her income works out to
$8,033 a month"). Written after the offline reader's last change; the README reports its first
measurement and the reader is not changed for it.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal

from pipeline.bench.draft import Draft
from pipeline.core.domains.base import money

_PEOPLE = ("Ms. Ferreira", "Mr. Okafor", "Ms. Lindqvist", "Mr. Brennan", "Dr. Raman", "Mrs. Nowak")
_WRITERS = (
    "Helen Marsh, Senior Underwriter",
    "Victor Adeyemi, Claims Examiner",
    "Ruth Castellano, RN Reviewer",
    "Paul Nakamura, Revenue Agent",
)


def _written(day: dt.date) -> str:
    return f"{day:%B} {day.day}, {day.year}"


def _two(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _letter(rng: random.Random, day: dt.date, to: str, body: str) -> str:
    return f"{_written(day)}\n\nDear {to},\n\n{body}\n\nSincerely,\n{rng.choice(_WRITERS)}"


def _memo(day: dt.date, subject: str, body: str) -> str:
    return f"MEMORANDUM - {_written(day)}\nRe: {subject}\n\n{body}"


def _loan(rng: random.Random, label: str) -> Draft:
    failing = rng.choice(["score", "dti", "ltv"]) if label == "DENY" else ""
    score = rng.randint(585, 615) if failing == "score" else rng.randint(640, 800)
    monthly = _two(Decimal(rng.randint(5_500, 16_000)))
    dti = Decimal(str(round(rng.uniform(44, 52) if failing == "dti" else rng.uniform(22, 41.5), 1)))
    debt = _two(monthly * dti / 100)
    value = Decimal(rng.randint(230, 880) * 1000)
    ltv_goal = rng.uniform(96, 103) if failing == "ltv" else rng.uniform(55, 92)
    amount = (value * Decimal(str(ltv_goal)) / 100).quantize(Decimal("1000"))
    person = rng.choice(_PEOPLE)
    day = dt.date(2026, rng.randint(1, 8), rng.randint(1, 28))
    values = {
        "loan_amount": money(amount),
        "appraised_value": money(value),
        "gross_monthly_income": money(monthly),
        "monthly_debt": money(debt),
        "credit_score": str(score),
    }
    low, high = score - rng.randint(5, 30), score + rng.randint(4, 35)
    documents = [
        _letter(
            rng,
            day,
            person,
            f"Thank you for choosing us for your home purchase. We have received your request "
            f"to borrow {values['loan_amount']} toward the property on {rng.choice(['Elm', 'Ridge', 'Bay'])} "
            "Street, and your file has been assigned to an underwriter.",
        ),
        _memo(
            day + dt.timedelta(days=3),
            "credit",
            f"The three bureaus returned {low}, {values['credit_score']} and {high} for {person}. As usual we "
            f"qualify on the middle of the three, which is {values['credit_score']}.",
        ),
        _memo(
            day + dt.timedelta(days=6),
            "income and obligations",
            f"Employment was confirmed with the employer. Averaging the last two years, {person}'s gross income "
            f"works out to {values['gross_monthly_income']} a month. Adding the proposed housing payment to the "
            f"car loan and card minimums, the monthly obligations come to {values['monthly_debt']}.",
        ),
        _memo(
            day + dt.timedelta(days=12),
            "valuation",
            f"The appraiser inspected on {_written(day + dt.timedelta(days=10))} and concluded a market value of "
            f"{values['appraised_value']}; the sales contract price was {money(value + 5000)}.",
        ),
    ]
    return Draft(values, [("letter", d) for d in documents])


def _claim(rng: random.Random, label: str) -> Draft:
    start = dt.date(2025, rng.randint(1, 12), rng.randint(1, 28))
    end = start.replace(year=2026)
    reason = rng.choice(["period", "peril"]) if label == "DENY" else ""
    loss = (
        end + dt.timedelta(days=rng.randint(3, 40))
        if reason == "period"
        else start + dt.timedelta(days=rng.randint(20, 340))
    )
    peril = rng.choice(["flood", "earthquake"]) if reason == "peril" else rng.choice(["hail", "fire", "windstorm"])
    limit = Decimal(rng.randint(200, 600) * 1000)
    deductible = Decimal(rng.choice([1000, 2000, 2500]))
    assessed = _two(Decimal(rng.randint(9_000, 70_000)))
    payable = assessed - deductible
    claimed = (payable - rng.randint(200, 1500)) if label in ("PAY", "DENY") else payable + rng.randint(3000, 20_000)
    person = rng.choice(_PEOPLE)
    values = {
        "date_of_loss": _written(loss),
        "effective_date": _written(start),
        "expiration_date": _written(end),
        "cause_of_loss": peril,
        "coverage_limit": money(limit),
        "deductible": money(deductible),
        "claimed_amount": money(_two(Decimal(claimed))),
        "assessed_damage": money(assessed),
    }
    documents = [
        _letter(
            rng,
            loss + dt.timedelta(days=2),
            person,
            f"We are sorry to hear about the {peril} damage to your home on {values['date_of_loss']}. Your "
            f"homeowners policy runs from {values['effective_date']} to {values['expiration_date']}, with a "
            f"dwelling limit of {values['coverage_limit']} and a deductible of {values['deductible']}.",
        ),
        _memo(
            loss + dt.timedelta(days=9),
            "inspection",
            f"I inspected the dwelling with the contractor. Our estimate of the covered repairs, after "
            f"depreciation, is {values['assessed_damage']}; the contractor's own bid was "
            f"{money(assessed + rng.randint(2000, 9000))}.",
        ),
        _letter(
            rng,
            loss + dt.timedelta(days=30),
            person,
            f"We have received your signed statement asking us to pay {values['claimed_amount']} for the "
            "damage. We will respond within the time the regulations allow.",
        ),
    ]
    return Draft(values, [("letter", d) for d in documents])


def _prior_auth(rng: random.Random, label: str) -> Draft:
    short = label == "DENY"
    symptoms = rng.randint(2, 5) if short and rng.random() < 0.5 else rng.randint(7, 30)
    therapy = rng.randint(1, 5) if short and symptoms >= 6 else rng.randint(6, 14)
    day = dt.date(2026, rng.randint(1, 8), rng.randint(1, 28))
    person = rng.choice(_PEOPLE)
    values = {"symptom_weeks": str(symptoms), "therapy_weeks": str(therapy), "neuro_deficit": "absent"}
    documents = [
        _letter(
            rng,
            day,
            "Reviewer",
            f"I am requesting a lumbar MRI for my patient, {person}, who has had back pain running down the "
            f"right leg for {symptoms} weeks. Examination today found normal strength, sensation and reflexes.",
        ),
        _memo(
            day + dt.timedelta(days=2),
            "therapy record",
            f"The physical therapy clinic confirms {person} attended twice weekly for {therapy} weeks before "
            "this request, with little change in pain scores.",
        ),
    ]
    return Draft(values, [("letter", d) for d in documents], anchors=("symptom_weeks", "therapy_weeks"))


def _tax_exam(rng: random.Random, label: str) -> Draft:
    kind = rng.choice(["income", "deductions"]) if label == "ADJUST" else ""
    reported = Decimal(rng.randint(45_000, 220_000))
    gap = Decimal(rng.randint(1_500, 18_000) if kind == "income" else rng.randint(0, 700))
    claimed = Decimal(rng.randint(9_000, 40_000))
    disallowed = Decimal(rng.randint(1_500, 9_000) if kind == "deductions" else rng.randint(0, 700))
    person = rng.choice(_PEOPLE)
    day = dt.date(2025, rng.randint(1, 9), rng.randint(1, 28))
    values = {
        "reported_income": money(reported),
        "information_return_income": money(reported + gap),
        "claimed_deductions": money(claimed),
        "substantiated_deductions": money(claimed - disallowed),
    }
    documents = [
        _letter(
            rng,
            day,
            person,
            f"Your return shows income of {values['reported_income']} and deductions of "
            f"{values['claimed_deductions']}. Please bring your receipts and statements to our meeting.",
        ),
        _memo(
            day + dt.timedelta(days=14),
            "matching",
            f"The wage statements and 1099 forms that payers sent us for {person} add up to "
            f"{values['information_return_income']}.",
        ),
        _memo(
            day + dt.timedelta(days=40),
            "records",
            f"{person} brought receipts, mileage logs and bank statements; of the deductions, "
            f"{values['substantiated_deductions']} is supported by records.",
        ),
    ]
    return Draft(values, [("letter", d) for d in documents])


_DRAFTS: dict[str, Callable[[random.Random, str], Draft]] = {
    "loan": _loan,
    "claim": _claim,
    "prior_auth": _prior_auth,
    "tax_exam": _tax_exam,
}


def label_space(domain: str) -> tuple[str, ...] | None:
    """Letters decide over each domain's own label space, under its standard thresholds."""
    del domain
    return None


def draft(rng: random.Random, domain: str, label: str, hard: bool) -> Draft:
    """A letters case; its core facts sit in paragraphs of correspondence."""
    del hard
    return _DRAFTS[domain](rng, label)


_ROUTINE = (
    "Thank you for your patience while we review your file. If you have questions, call us on weekdays between "
    "{h} a.m. and {k} p.m.; please have reference {ref} ready.",
    "This is to confirm that we received {n} pages on {d}. Nothing further is needed from you for now.",
    "As discussed on the phone on {d}, the next review meeting is set for {d2}. We will write again afterwards.",
    "Our office will be closed on {d} for the holiday. Messages left on that day will be answered the next day.",
)


def filler(rng: random.Random, when: dt.date) -> tuple[str, str]:
    """Routine correspondence around the case."""
    text = rng.choice(_ROUTINE).format(
        h=rng.randint(8, 10),
        k=rng.randint(4, 6),
        ref=f"R-{rng.randint(1000, 9999)}",
        n=rng.randint(2, 30),
        d=_written(when + dt.timedelta(days=rng.randint(0, 40))),
        d2=_written(when + dt.timedelta(days=rng.randint(41, 60))),
    )
    return "letter", _letter(rng, when + dt.timedelta(days=rng.randint(0, 40)), rng.choice(_PEOPLE), text)


def injection(rng: random.Random, domain: str, case: Draft) -> str:
    """Letters carry no planted instructions."""
    del rng, domain, case
    return ""
