"""Domain rule tables: field extraction (decoys, amendments) and each domain's policy."""

from __future__ import annotations

import pytest

from pipeline.core.domains import DOMAINS, rules_for
from pipeline.core.fields import FieldValue, extract_fields


def _values(domain: str, *texts: str) -> dict[str, FieldValue]:
    rules = rules_for(domain)
    assert rules is not None
    return extract_fields(rules.fields, list(enumerate(texts, start=1)))


def test_latest_statement_wins_and_decoys_are_skipped() -> None:
    values = _values(
        "loan",
        "Gross monthly income $9,850 per VOE. Appraised value $455,000.",
        "Guidelines: a minimum credit score of 620 is required. Credit score 688 on file.",
        "Corrected gross monthly income $8,900. "
        "The prior appraised value $455,000 is superseded; appraised value $441,000.",
    )
    assert values["gross_monthly_income"].text == "$8,900"
    assert values["gross_monthly_income"].index == 3
    assert values["appraised_value"].text == "$441,000"
    assert values["credit_score"].text == "688"


def test_a_fact_written_with_its_label_reads_back() -> None:
    assert _values("tax_exam", "Income on information returns: $88,400")["information_return_income"].text == "$88,400"


@pytest.mark.parametrize(
    ("texts", "label"),
    [
        (
            (
                "Credit score 700. Gross monthly income $10,000. Total monthly debt $3,000. "
                "Loan amount $300,000. Appraised value $400,000.",
            ),
            "APPROVE",
        ),
        (
            (
                "Credit score 700. Gross monthly income $10,000. Total monthly debt $4,400. "
                "Loan amount $300,000. Appraised value $400,000.",
            ),
            "DENY",
        ),
        (
            (
                "Credit score 580. Gross monthly income $10,000. Total monthly debt $3,000. "
                "Loan amount $300,000. Appraised value $400,000.",
            ),
            "DENY",
        ),
        (("Credit score 700. Gross monthly income $10,000.",), "DENY"),  # missing facts: cannot verify
    ],
)
def test_loan_policy(texts: tuple[str, ...], label: str) -> None:
    assert DOMAINS["loan"].policy(_values("loan", *texts)).label == label


def _claim(loss: str, cause: str, assessed: str, claimed: str) -> str:
    return (
        f"Effective date 2025-06-01. Expiration date 2026-05-31. Date of loss {loss}. Cause of loss: {cause}. "
        f"Coverage limit $250,000. Deductible $1,000. Claimed amount {claimed}. Assessed damage {assessed}."
    )


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (_claim("2026-01-10", "hail", "$20,000", "$18,000"), "PAY"),
        (_claim("2026-01-10", "hail", "$15,000", "$18,000"), "PARTIAL PAY"),
        (_claim("2026-07-10", "hail", "$20,000", "$18,000"), "DENY"),
        (_claim("2026-01-10", "flood", "$20,000", "$18,000"), "DENY"),
        (_claim("2026-01-10", "fire", "$900", "$900"), "DENY"),
    ],
)
def test_claim_policy(text: str, label: str) -> None:
    verdict = DOMAINS["claim"].policy(_values("claim", text))
    assert verdict.label == label
    if label != "PAY":
        assert verdict.reasons


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Neurological deficit: present. Symptom duration 2 weeks. Conservative therapy 0 weeks.", "APPROVE"),
        ("Neurological deficit: absent. Symptom duration 10 weeks. Conservative therapy 7 weeks.", "APPROVE"),
        ("Neurological deficit: absent. Symptom duration 10 weeks. Conservative therapy 4 weeks.", "DENY"),
    ],
)
def test_prior_auth_policy(text: str, label: str) -> None:
    assert DOMAINS["prior_auth"].policy(_values("prior_auth", text)).label == label


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (
            "Reported income $80,000. Information returns show $80,500. Claimed deductions $12,000. "
            "Substantiated deductions $11,800.",
            "NO CHANGE",
        ),
        (
            "Reported income $80,000. Information returns show $86,000. Claimed deductions $12,000. "
            "Substantiated deductions $11,800.",
            "ADJUST",
        ),
        (
            "Reported income $80,000. Information returns show $80,000. Claimed deductions $12,000. "
            "Substantiated deductions $7,000.",
            "ADJUST",
        ),
    ],
)
def test_tax_exam_policy(text: str, label: str) -> None:
    assert DOMAINS["tax_exam"].policy(_values("tax_exam", text)).label == label


def test_every_domain_names_provisions_and_labels_its_policy_can_return() -> None:
    for rules in DOMAINS.values():
        assert rules.provisions
        assert set(rules.negative_labels) <= set(rules.label_space)
        assert rules.policy({}).label in rules.label_space
