"""Seeded, deterministic generation of long-horizon cases by inversion (label first, documents second)."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

from pipeline.bench.filler import filler_event, injection, pad
from pipeline.bench.scenarios import SCENARIOS, Scenario
from pipeline.core.anchors import contains_verbatim
from pipeline.core.case import Case, RequiredAnchor
from pipeline.core.domains import rules_for
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, Trajectory
from pipeline.core.fields import FieldValue
from pipeline.core.task import TaskSpec

DOMAINS = tuple(SCENARIOS)
DEFAULT_SEED = 20260420


@dataclass(frozen=True)
class GenerationSpec:
    """How many cases, how long, how hostile."""

    domains: tuple[str, ...] = DOMAINS
    per_domain: int = 5
    seed: int = DEFAULT_SEED
    events: tuple[int, int] = (82, 96)
    chars: tuple[int, int] = (26_000, 28_000)
    adversarial: bool = False
    tenant: str = "bench"


class GenerationError(DpmError):
    """A spec that cannot be met (unknown domain, impossible length)."""


def _field_values(scenario: Scenario) -> dict[str, FieldValue]:
    """The scenario's final values as the policy sees them (normalized like extracted fields)."""
    from pipeline.core.anchors import extract_anchors  # noqa: PLC0415 - small, local use

    values = {}
    for key, text in scenario.values.items():
        anchors = extract_anchors(text)
        value = anchors[0].value if anchors else text.lower()
        values[key] = FieldValue(key, text, value, 0)
    return values


def _core_events(rng: random.Random, scenario: Scenario) -> list[tuple[str, str]]:
    """Field statements (earlier values first, corrections later) and decoys, in a plausible order."""
    statements = []
    for key, value in scenario.values.items():
        template = rng.choice(scenario.templates[key])
        if key in scenario.earlier:
            statements.append(("document", template.format(v=scenario.earlier[key])))
            statements.append(("amendment", scenario.corrections[key].format(v=value)))
        else:
            statements.append(("document", template.format(v=value)))
    return statements + [("guidance", d) for d in scenario.decoys]


def _interleave(
    rng: random.Random, core: list[tuple[str, str]], fillers: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Spreads core events among fillers; an amendment always comes after the statement it corrects."""
    slots = sorted(rng.sample(range(len(core) + len(fillers)), len(core)))
    ordered, core_iter, filler_iter = [], iter(core), iter(fillers)
    for index in range(len(core) + len(fillers)):
        ordered.append(next(core_iter) if index in slots else next(filler_iter))
    return ordered


def _fit_length(rng: random.Random, events: list[tuple[str, str]], target: int, core: set[int]) -> None:
    """Pads filler events until the trajectory reaches `target` characters."""
    fillers = [i for i in range(len(events)) if i not in core]
    total = sum(len(t) for _, t in events)
    while total < target and fillers:
        i = rng.choice(fillers)
        before = len(events[i][1])
        events[i] = (events[i][0], pad(rng, events[i][1]))
        total += len(events[i][1]) - before


def generate_case(spec: GenerationSpec, domain: str, number: int) -> Case:
    """One case; the same (seed, domain, number) always gives the same case, in any process."""
    rules = rules_for(domain)
    if rules is None or domain not in SCENARIOS:
        raise GenerationError(f"no generator for domain {domain!r}; choose from {', '.join(DOMAINS)}")
    rng = random.Random(f"{spec.seed}:{domain}:{number}")  # str seeds are hashed with SHA-512: stable
    label = rules.label_space[number % len(rules.label_space)]  # balanced over the label space
    scenario = SCENARIOS[domain](rng, label)
    verdict = rules.policy(_field_values(scenario))
    if verdict.label != label:
        raise GenerationError(f"scenario for {domain} #{number} implies {verdict.label}, not {label}")
    core = _core_events(rng, scenario)
    n_events = rng.randint(*spec.events)
    if n_events <= len(core):
        raise GenerationError(f"{n_events} events cannot hold {len(core)} core statements")
    start = dt.date(2026, 1, 5)
    fillers = [filler_event(rng, start) for _ in range(n_events - len(core))]
    if spec.adversarial:
        fake = str(int(scenario.values.get("credit_score", "700")) + 150) if domain == "loan" else "$999,999"
        for i in rng.sample(range(len(fillers)), min(3, len(fillers))):
            fillers[i] = ("correspondence", fillers[i][1] + " " + injection(rng, fake))
    events = _interleave(rng, core, fillers)
    core_positions = {i for i, e in enumerate(events) if e in core}
    _fit_length(rng, events, rng.randint(*spec.chars), core_positions)
    case_ref = CaseRef(spec.tenant, f"{domain}-{spec.seed}-{number:03d}")
    trajectory = Trajectory(case_ref, tuple(Event(case_ref, i, k, t) for i, (k, t) in enumerate(events, start=1)))
    anchors = tuple(RequiredAnchor(s.key, scenario.values[s.key]) for s in rules.fields if s.key in scenario.values)
    for anchor in anchors:  # inversion's guarantee: every required anchor is derivable from the events
        if not any(contains_verbatim(e.text, anchor.value) or anchor.value in e.text for e in trajectory.events):
            raise GenerationError(f"{case_ref.key}: anchor {anchor.key}={anchor.value} is not in any event")
    return Case(
        trajectory=trajectory,
        task=TaskSpec(domain, rules.task, rules.label_space),
        label=label,
        required_anchors=anchors,
        compliance_provisions=tuple(p.ref for p in rules.provisions_for(label)),
        reasoning_points=verdict.reasons + verdict.findings,
    )


def generate_cases(spec: GenerationSpec) -> list[Case]:
    """`per_domain` cases for each domain, labels balanced over each domain's label space."""
    return [generate_case(spec, domain, n) for domain in spec.domains for n in range(spec.per_domain)]
