"""Mortgage underwriting under ECOA / Regulation B and the ability-to-repay rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import (
    Applies,
    Checks,
    DomainRules,
    Limit,
    Provision,
    Verdict,
    limit_of,
    percent,
    threshold,
)
from pipeline.core.fields import FieldSpec, FieldValue

# How a task states its own thresholds ("credit score at least 660", "maximum DTI 45%", "LTV 90% max").
_PERCENT = r"(\d+(?:\.\d+)?)\s*%?"  # shorthand drops the sign: "DTI <= 45"
MIN_CREDIT_SCORE = threshold("min_credit_score", Decimal(620), r"(?:credit|FICO|qualifying) score|FICO", r"(\d{3})",
                             at_least=True)  # fmt: skip
MAX_DTI_PERCENT = threshold("max_dti_percent", Decimal(43), r"debt[- ]to[- ]income(?: ratio)?|DTI|back[- ]end ratio",
                            _PERCENT, at_least=False)  # fmt: skip
MAX_LTV_PERCENT = threshold("max_ltv_percent", Decimal(95), r"loan[- ]to[- ]value(?: ratio)?|C?LTV", _PERCENT,
                            at_least=False)  # fmt: skip

FIELDS = (
    FieldSpec(
        "application_id",
        "Application ID",
        (r"application (?:number|no\.?|id)", r"loan (?:number|no\.?|#)"),
        AnchorKind.IDENT,
    ),
    FieldSpec(
        "loan_amount",
        "Loan amount",
        (r"loan amount", r"requested (?:loan )?amount", r"(?:base |loan )(?:loan )?(?:amount|amt)"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "appraised_value", "Appraised value", (r"appraised value", r"appraisal value"), AnchorKind.MONEY, weight=2
    ),
    FieldSpec(
        "gross_monthly_income",
        "Gross monthly income",
        (r"gross monthly income", r"monthly (?:gross |qualifying )?income", r"income per month"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "annual_income",
        "Annual income",
        (r"(?:gross )?annual (?:gross |base |qualifying )?(?:income|salary|pay|earnings)", r"yearly (?:income|salary)"),
        AnchorKind.MONEY,
        weight=2,
        alternative=True,
    ),
    FieldSpec(
        "monthly_debt",
        "Total monthly debt",
        (r"total monthly debt(?: obligations| payments)?",),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "credit_score",
        "Credit score",
        (
            r"credit score",
            r"FICO(?: score)?",
            r"representative (?:credit )?score",
            r"(?:middle|mid|qualifying|decision) (?:credit )?score",
            r"mid(?:dle)?(?= \d{3}\b)",  # underwriters' shorthand: "eq 695 / ex 709 / tu 720, mid 709"
        ),
        AnchorKind.NUMBER,
        weight=2,
        bounds=(Decimal(300), Decimal(850)),  # FICO and VantageScore ranges
    ),
    # Ratios as files state them; a stated ratio stands unless its parts were stated later.
    FieldSpec(
        "dti_ratio",
        "Debt-to-income ratio",
        (r"DTI", r"debt[- ]to[- ]income(?: ratio)?", r"back[- ]end (?:ratio|DTI)", r"total debt ratio"),
        AnchorKind.PERCENT,
        weight=2,
        alternative=True,
        bounds=(Decimal(0), Decimal(200)),
    ),
    FieldSpec(
        "ltv_ratio",
        "Loan-to-value ratio",
        (r"C?LTV", r"loan[- ]to[- ]value(?: ratio)?"),
        AnchorKind.PERCENT,
        weight=2,
        alternative=True,
        bounds=(Decimal(0), Decimal(200)),
    ),
    FieldSpec(
        "application_date", "Application date", (r"application date", r"application received on"), AnchorKind.DATE
    ),
)


def policy(values: Mapping[str, FieldValue], limits: Mapping[str, Decimal] | None = None) -> Verdict:
    """APPROVE when score >= 620, DTI <= 43% and LTV <= 95% (or the task's own thresholds); else DENY."""
    values = _monthly_income(values)
    checks = Checks(values)
    minimum = limit_of(limits, MIN_CREDIT_SCORE)
    if not checks.missing("credit_score"):
        score = values["credit_score"].number or Decimal(0)
        if score < minimum:
            checks.reasons.append(f"Credit score {checks.text('credit_score')} is below the minimum of {minimum}")
        else:
            checks.findings.append(f"Credit score {checks.text('credit_score')} meets the minimum of {minimum}.")
    for rule in _RATIOS:
        found = _ratio(checks, values, rule)
        if found is not None:
            maximum = limit_of(limits, rule.maximum)
            checks.at_most(found[0], maximum, found[1], too_high=f"{rule.wording} ratio too high: ",
                           within=f"the {maximum}% maximum")  # fmt: skip
    return checks.verdict("APPROVE", "DENY")


@dataclass(frozen=True)
class _Ratio:
    """A policy ratio: its name, the field stating it, the fields it is computed from, its maximum."""

    name: str
    stated: str
    part: str
    whole: str
    maximum: Limit
    wording: str


_RATIOS = (
    _Ratio("DTI", "dti_ratio", "monthly_debt", "gross_monthly_income", MAX_DTI_PERCENT, "Debt-to-income"),
    _Ratio("LTV", "ltv_ratio", "loan_amount", "appraised_value", MAX_LTV_PERCENT, "Loan-to-value"),
)


def _monthly_income(values: Mapping[str, FieldValue]) -> Mapping[str, FieldValue]:
    """The values with a monthly income derived from an annual one, where only the annual is stated (or later)."""
    annual, monthly = values.get("annual_income"), values.get("gross_monthly_income")
    if annual is None or annual.number is None or (monthly is not None and monthly.index > annual.index):
        return values
    derived = (annual.number / 12).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return {**values, "gross_monthly_income": FieldValue("gross_monthly_income", f"{annual.text} / 12",
                                                         str(derived), annual.index)}  # fmt: skip


def _ratio(checks: Checks, values: Mapping[str, FieldValue], rule: _Ratio) -> tuple[Decimal, str] | None:
    """The ratio in percent and how it was found: as the file states it, or from its parts."""
    ratio = values.get(rule.stated)
    parts = [values[k] for k in (rule.part, rule.whole) if k in values and values[k].number is not None]
    if ratio is not None and ratio.number is not None and all(p.index <= ratio.index for p in parts):
        return ratio.number, f"{rule.name} {ratio.text} as stated"
    if checks.missing(rule.part, rule.whole):
        return None
    computed = percent(checks.number(rule.part), checks.number(rule.whole) or Decimal(1))
    return computed, f"{rule.name} {checks.text(rule.part)} / {checks.text(rule.whole)} = {computed}%"


RULES = DomainRules(
    domain="loan",
    title="mortgage underwriting",
    label_space=("APPROVE", "DENY"),
    task="Decide whether to approve or deny this mortgage application under the lender's credit policy "
    "(credit score at least 620, debt-to-income at most 43%, loan-to-value at most 95%).",
    fields=FIELDS,
    keywords=("income", "debt", "credit", "appraisal", "loan", "employment", "asset", "mortgage", "borrower"),
    provisions=(
        Provision(
            "12 CFR 1002.9",
            "ECOA / Regulation B 12 CFR 1002.9: notify the applicant of the action taken "
            "within 30 days; an adverse action notice states the specific principal reasons.",
        ),
        Provision(
            "12 CFR 1002.6",
            "Regulation B 12 CFR 1002.6: the evaluation uses no prohibited basis "
            "(race, sex, marital status, age, public assistance income).",
        ),
        Provision(
            "12 CFR 1026.43",
            "Ability-to-repay rule 12 CFR 1026.43: income and debts verified from third-party records.",
        ),
        Provision(
            "FCRA 615(a)",
            "FCRA section 615(a): disclose the credit score used and the credit "
            "reporting agency in the adverse action notice.",
            Applies.NEGATIVE,
        ),
    ),
    policy=policy,
    negative_labels=("DENY",),
    reasons_heading="Principal reasons for the adverse action taken on the application "
    "(ECOA / Regulation B, 12 CFR 1002.9)",
    limits=(MIN_CREDIT_SCORE, MAX_DTI_PERCENT, MAX_LTV_PERCENT),
)
