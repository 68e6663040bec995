"""Mortgage underwriting under ECOA / Regulation B and the ability-to-repay rule."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import Applies, Checks, DomainRules, Provision, Verdict, percent
from pipeline.core.fields import FieldSpec, FieldValue

MIN_CREDIT_SCORE = Decimal(620)
MAX_DTI_PERCENT = Decimal(43)
MAX_LTV_PERCENT = Decimal(95)

FIELDS = (
    FieldSpec(
        "application_id", "Application ID", (r"application (?:number|no\.?|id)", r"loan number"), AnchorKind.IDENT
    ),
    FieldSpec(
        "loan_amount", "Loan amount", (r"loan amount", r"requested (?:loan )?amount"), AnchorKind.MONEY, weight=2
    ),
    FieldSpec(
        "appraised_value", "Appraised value", (r"appraised value", r"appraisal value"), AnchorKind.MONEY, weight=2
    ),
    FieldSpec("gross_monthly_income", "Gross monthly income", (r"gross monthly income",), AnchorKind.MONEY, weight=2),
    FieldSpec(
        "monthly_debt",
        "Total monthly debt",
        (r"total monthly debt(?: obligations| payments)?",),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec("credit_score", "Credit score", (r"credit score", r"FICO score"), AnchorKind.NUMBER, weight=2),
    FieldSpec(
        "application_date", "Application date", (r"application date", r"application received on"), AnchorKind.DATE
    ),
)


def policy(values: Mapping[str, FieldValue]) -> Verdict:
    """APPROVE when score >= 620, DTI <= 43% and LTV <= 95%; otherwise DENY with principal reasons."""
    checks = Checks(values)
    if not checks.missing("credit_score"):
        score = values["credit_score"].number or Decimal(0)
        if score < MIN_CREDIT_SCORE:
            checks.reasons.append(f"Credit score {checks.text('credit_score')} is below the minimum of 620")
        else:
            checks.findings.append(f"Credit score {checks.text('credit_score')} meets the minimum of 620.")
    for name, part, whole, maximum, label in _RATIOS:
        if not checks.missing(part, whole):
            ratio = percent(checks.number(part), checks.number(whole) or Decimal(1))
            statement = f"{name} {checks.text(part)} / {checks.text(whole)} = {ratio}%"
            checks.at_most(ratio, maximum, statement, too_high=f"{label} ratio too high: ",
                           within=f"the {maximum}% maximum")  # fmt: skip
    return checks.verdict("APPROVE", "DENY")


# (name, numerator field, denominator field, maximum percent, reason wording)
_RATIOS = (
    ("DTI", "monthly_debt", "gross_monthly_income", MAX_DTI_PERCENT, "Debt-to-income"),
    ("LTV", "loan_amount", "appraised_value", MAX_LTV_PERCENT, "Loan-to-value"),
)


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
)
