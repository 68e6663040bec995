"""Clinical prior authorization of advanced imaging (lumbar spine MRI) under Medicare Advantage rules."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pipeline.core.anchors import AnchorKind
from pipeline.core.domains.base import Applies, Checks, DomainRules, Limit, Provision, Verdict, limit_of
from pipeline.core.fields import FieldSpec, FieldValue

MIN_WEEKS = Limit("min_weeks", Decimal(6), (r"(?:at least|minimum of|no less than)\s+(\d+)\s+weeks",
                                            r"(\d+) (?:or more )?weeks (?:or more|minimum)",
                                            r"(?:>=|≥)\s*(\d+)\s*(?:weeks|wks)"))  # fmt: skip

FIELDS = (
    FieldSpec("member_id", "Member ID", (r"member (?:id|number)", r"mbr(?: id)?"), AnchorKind.IDENT),
    FieldSpec("cpt_code", "CPT code", (r"CPT(?: code)?",), AnchorKind.NUMBER),
    FieldSpec("diagnosis_code", "Diagnosis code", (r"ICD-10(?: code)?", r"diagnosis code"), AnchorKind.IDENT),
    FieldSpec("request_date", "Request date", (r"request date", r"request received on"), AnchorKind.DATE),
    FieldSpec(
        "symptom_weeks",
        "Symptom duration (weeks)",
        (
            r"symptom duration",
            r"duration of symptoms",
            r"symptoms? (?:for|x|of|began|started)",
            r"(?:back|leg|neck|radicular|radiating) pain[^.;\n]{0,60}?\b(?:for|x)(?= \d)",
            r"(?:LBP|radic(?:ulopathy)?|sx)[^.;\n]{0,40}?\bx(?= \d)",
        ),
        AnchorKind.NUMBER,
        weight=2,
    ),
    FieldSpec(
        "therapy_weeks",
        "Conservative therapy (weeks)",
        (
            r"conservative (?:therapy|treatment|management|care)",
            r"physical therapy(?! notes)",
            r"PT x",
            r"PT[^.;\n]{0,40}?\b(?:over|for)(?= \d)",
        ),
        AnchorKind.NUMBER,
        weight=2,
        value_first=(r"weeks? of (?:supervised )?(?:physical therapy|PT|conservative (?:therapy|treatment|care))",),
    ),
    FieldSpec(
        "neuro_deficit",
        "Neurological deficit",
        (r"neurological deficit", r"(?:focal |motor |sensory |neuro(?:logical)? )+(?:or \w+ )?deficits?"),
        None,
        vocabulary=("present", "absent"),
        weight=2,
    ),
)


def policy(values: Mapping[str, FieldValue], limits: Mapping[str, Decimal] | None = None) -> Verdict:
    """APPROVE with a neurological deficit, or with >= 6 weeks (or the task's own) of symptoms and of therapy."""
    checks = Checks(values)
    minimum = limit_of(limits, MIN_WEEKS)
    deficit = values.get("neuro_deficit")
    if deficit is not None and deficit.value == "present":
        checks.findings.append("Neurological deficit present: a red flag that establishes medical necessity.")
        return Verdict("APPROVE", (), tuple(checks.findings))
    if deficit is not None:
        checks.findings.append("Neurological deficit absent: conservative-care criteria apply.")
    for key, what in (("symptom_weeks", "Symptom duration"), ("therapy_weeks", "Conservative therapy")):
        if checks.missing(key):
            continue
        weeks = values[key].number or Decimal(0)
        if weeks < minimum:
            checks.reasons.append(f"{what} of {checks.text(key)} weeks is below the {minimum}-week criterion")
        else:
            checks.findings.append(f"{what} of {checks.text(key)} weeks meets the {minimum}-week criterion.")
    return checks.verdict("APPROVE", "DENY")


RULES = DomainRules(
    domain="prior_auth",
    title="clinical prior authorization",
    label_space=("APPROVE", "DENY"),
    task="Decide this prior authorization request for a lumbar spine MRI (CPT 72148): approve when a "
    "neurological deficit is documented, or symptoms and conservative therapy each lasted at least 6 weeks.",
    fields=FIELDS,
    keywords=("MRI", "lumbar", "therapy", "symptom", "deficit", "physician", "imaging", "member", "clinical"),
    provisions=(
        Provision(
            "42 CFR 422.568",
            "42 CFR 422.568: standard organization determination within the required "
            "timeframe, with written notice of a denial.",
        ),
        Provision(
            "42 CFR 422.101",
            "42 CFR 422.101: coverage criteria and medical necessity documented from the clinical record.",
        ),
        Provision(
            "appeal rights",
            "Denial notice states the specific clinical reason and the member's appeal "
            "rights (42 CFR 422.572 for expedited review).",
            Applies.NEGATIVE,
        ),
        Provision(
            "45 CFR 164.502(b)",
            "HIPAA minimum necessary standard, 45 CFR 164.502(b): only the clinical "
            "information needed for the determination.",
        ),
    ),
    policy=policy,
    limits=(MIN_WEEKS,),
    negative_labels=("DENY",),
    reasons_heading="Reasons for the adverse determination of the prior authorization request",
)
