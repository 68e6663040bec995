"""Individual income tax examination: unreported income and unsubstantiated deductions."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import Applies, Checks, DomainRules, Provision, Verdict, money
from pipeline.core.fields import FieldSpec, FieldValue

TOLERANCE = Decimal(1000)

FIELDS = (
    FieldSpec("taxpayer_id", "Taxpayer ID", (r"taxpayer (?:id|identification number)",), AnchorKind.IDENT),
    FieldSpec("tax_year", "Tax year", (r"tax year",), AnchorKind.NUMBER),
    FieldSpec(
        "reported_income",
        "Reported income",
        (r"reported (?:total )?income", r"income reported on the return"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "information_return_income",
        "Income on information returns",
        (r"information returns? (?:show|total|report)(?:s|ed)?", r"third-party reported income"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "claimed_deductions",
        "Claimed deductions",
        (r"claimed deductions", r"deductions claimed"),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "substantiated_deductions",
        "Substantiated deductions",
        (r"substantiated deductions", r"deductions substantiated"),
        AnchorKind.MONEY,
        weight=2,
    ),
)


def policy(values: Mapping[str, FieldValue]) -> Verdict:
    """ADJUST when unreported income or unsubstantiated deductions exceed $1,000; else NO CHANGE."""
    checks = Checks(values)
    if not checks.missing("information_return_income", "reported_income"):
        gap = (values["information_return_income"].number or Decimal(0)) - (
            values["reported_income"].number or Decimal(0)
        )
        line = (
            f"Unreported income {money(gap)} = information returns {checks.text('information_return_income')} "
            f"- reported {checks.text('reported_income')}"
        )
        (checks.reasons if gap > TOLERANCE else checks.findings).append(
            line + (", above the $1,000 tolerance" if gap > TOLERANCE else ", within the $1,000 tolerance.")
        )
    if not checks.missing("claimed_deductions", "substantiated_deductions"):
        gap = (values["claimed_deductions"].number or Decimal(0)) - (
            values["substantiated_deductions"].number or Decimal(0)
        )
        line = (
            f"Unsubstantiated deductions {money(gap)} = claimed {checks.text('claimed_deductions')} "
            f"- substantiated {checks.text('substantiated_deductions')}"
        )
        (checks.reasons if gap > TOLERANCE else checks.findings).append(
            line + (", above the $1,000 tolerance" if gap > TOLERANCE else ", within the $1,000 tolerance.")
        )
    return checks.verdict("NO CHANGE", "ADJUST")


RULES = DomainRules(
    domain="tax_exam",
    title="tax examination",
    label_space=("NO CHANGE", "ADJUST"),
    task="Decide this individual income tax examination: ADJUST when unreported income or unsubstantiated "
    "deductions exceed $1,000, otherwise NO CHANGE.",
    fields=FIELDS,
    keywords=("income", "deduction", "return", "receipt", "examination", "taxpayer", "W-2", "1099", "substantiat"),
    provisions=(
        Provision(
            "IRC 6001",
            "IRC 6001 and Treas. Reg. 1.6001-1: the taxpayer must keep records substantiating income and deductions.",
        ),
        Provision(
            "IRC 7803(a)(3)",
            "Taxpayer Bill of Rights, IRC 7803(a)(3): the right to be informed and to challenge the IRS's position.",
        ),
        Provision(
            "IRC 6212",
            "IRC 6212: a notice of deficiency states the adjustments and the right to petition the Tax Court.",
            Applies.NEGATIVE,
        ),
        Provision(
            "IRC 6662",
            "IRC 6662: the accuracy-related penalty of 20% is considered for a substantial understatement.",
            Applies.NEGATIVE,
        ),
    ),
    policy=policy,
    negative_labels=("ADJUST",),
)
