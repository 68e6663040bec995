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
from pipeline.core.task import TaskSpec

DOMAINS: dict[str, DomainRules] = {r.domain: r for r in (loan.RULES, claim.RULES, prior_auth.RULES, tax_exam.RULES)}


def rules_for(domain: str) -> DomainRules | None:
    """The rule table of a known domain; None for any other domain (generic handling)."""
    return DOMAINS.get(domain)


def domain_task(domain: str) -> TaskSpec:
    """A domain's standing task and label space (its rule table's); any other domain is asked to approve or deny."""
    rules = rules_for(domain)
    if rules is None:
        return TaskSpec(domain, "Decide the case.", ("APPROVE", "DENY"))
    return TaskSpec(rules.domain, rules.task, rules.label_space)


__all__ = [
    "DOMAINS",
    "Applies",
    "DomainRules",
    "Limit",
    "Provision",
    "Verdict",
    "domain_task",
    "refer_if_unverified",
    "referral_label",
    "rules_for",
]
