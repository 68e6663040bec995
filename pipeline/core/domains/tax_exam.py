"""Individual income tax examination: unreported income and unsubstantiated deductions."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import Applies, Checks, DomainRules, Limit, Provision, Verdict, limit_of, money
from pipeline.core.fields import FieldSpec, FieldValue

TOLERANCE = Limit("tolerance", Decimal(1000), (r"(?:exceed|more than|above|over)\s+\$([\d,]+(?:\.\d+)?)",
                                               r"(?:tolerance|threshold)(?: of)?\s+\$([\d,]+(?:\.\d+)?)"))  # fmt: skip

FIELDS = (
    FieldSpec("taxpayer_id", "Taxpayer ID", (r"taxpayer (?:id|identification number)",), AnchorKind.IDENT),
    FieldSpec("tax_year", "Tax year", (r"tax year",), AnchorKind.NUMBER),
    FieldSpec(
        "reported_income",
        "Reported income",
        (
            r"reported (?:total )?income",
            r"income reported on the return",
            r"return as filed shows total income",
            r"total inc(?:ome)?(?: per (?:the )?return)?",
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "information_return_income",
        "Income on information returns",
        (
            r"information returns? (?:show|total|report)(?:s|ed)?",
            r"third-party reported income",
            r"filed by payers(?: total)?",
            r"payer[- ]reported (?:income|total)",
            r"IRP\b[^;\n]{0,80}?\btotal",  # amounts hold periods: no clause end before "total"
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "claimed_deductions",
        "Claimed deductions",
        (
            r"claimed deductions",
            r"deductions claimed",
            r"total deductions per return",
            r"itemized(?: deductions)?(?: (?:\+|and) sch(?:edule)?\.? C(?: expenses)?)?",
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
    FieldSpec(
        "substantiated_deductions",
        "Substantiated deductions",
        (
            r"substantiated deductions",
            r"deductions substantiated",
            r"allowed deductions(?: of)?",
            r"deductions allowed",
            r"substantiation(?: reviewed)?",
        ),
        AnchorKind.MONEY,
        weight=2,
    ),
)


def policy(values: Mapping[str, FieldValue], limits: Mapping[str, Decimal] | None = None) -> Verdict:
    """ADJUST when unreported income or unsubstantiated deductions exceed $1,000 (or the task's own); else NO CHANGE."""
    checks = Checks(values)
    tolerance = limit_of(limits, TOLERANCE)
    for name, larger, smaller, larger_word, smaller_word in _GAPS:
        if not checks.missing(larger, smaller):
            gap = checks.number(larger) - checks.number(smaller)
            statement = (f"{name} {money(gap)} = {larger_word} {checks.text(larger)} "
                         f"- {smaller_word} {checks.text(smaller)}")  # fmt: skip
            checks.at_most(gap, tolerance, statement, too_high="", within=f"the {money(tolerance)} tolerance")
    return checks.verdict("NO CHANGE", "ADJUST")


# (what the gap is, the larger field, the smaller field, how each is named in the finding)
_GAPS = (
    ("Unreported income", "information_return_income", "reported_income", "information returns", "reported"),
    ("Unsubstantiated deductions", "claimed_deductions", "substantiated_deductions", "claimed", "substantiated"),
)


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
    limits=(TOLERANCE,),
    negative_labels=("ADJUST",),
    reasons_heading="Reasons for the proposed adjustment, as the examination report states them",
)
