"""TAMS, the selection rule: replay, audit or isolation needs, or a high compression ratio, select DPM."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CROSSOVER = 10.0  # the DPM paper's threshold when no sweep of one's own is given


@dataclass(frozen=True)
class Needs:
    replay: bool = False
    audit: bool = False
    isolation: bool = False


@dataclass(frozen=True)
class Choice:
    architecture: str  # "DPM" or "either"
    reason: str


def select(needs: Needs, rho: float | None, crossover: float | None) -> Choice:
    """Applies the rule in order: hard requirements first, then the compression ratio against the crossover."""
    required = [name for name, needed in (("deterministic replay", needs.replay), ("audit-ready rationale",
                needs.audit), ("tenant isolation", needs.isolation)) if needed]  # fmt: skip
    if required:
        return Choice(
            "DPM", f"the deployment needs {', '.join(required)}, which stateful memory breaks by construction"
        )
    threshold = crossover if crossover is not None else DEFAULT_CROSSOVER
    source = "the sweep's crossover" if crossover is not None else "the default crossover"
    if rho is None:
        return Choice("either", f"no hard requirement and no compression ratio given (DPM from rho > {threshold:g})")
    if rho > threshold:
        return Choice("DPM", f"compression ratio {rho:g} exceeds {source} of {threshold:g}")
    return Choice("either", f"compression ratio {rho:g} is at most {source} of {threshold:g}; no hard requirement")
