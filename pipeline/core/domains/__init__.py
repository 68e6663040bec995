"""Domain rule tables, by domain identifier."""

from __future__ import annotations

from pipeline.core.domains import claim, loan, prior_auth, tax_exam
from pipeline.core.domains.base import (
    Applies,
    DomainRules,
    Limit,
    Provision,
    Verdict,
    refer_if_unverified,
    referral_label,
)

DOMAINS: dict[str, DomainRules] = {r.domain: r for r in (loan.RULES, claim.RULES, prior_auth.RULES, tax_exam.RULES)}


def rules_for(domain: str) -> DomainRules | None:
    """The rule table of a known domain; None for any other domain (generic handling)."""
    return DOMAINS.get(domain)


__all__ = [
    "DOMAINS",
    "Applies",
    "DomainRules",
    "Limit",
    "Provision",
    "Verdict",
    "refer_if_unverified",
    "referral_label",
    "rules_for",
]
