"""Seeded, deterministic generation of long-horizon cases by inversion (label first, documents second).

Two voices write the documents. `forms` (the default) states each figure in a short templated
sentence; its cases are the ones the offline backend is tuned on. `dossier` writes the way
other people's files read (e-mails, memos, tables, key-value forms, bureau printouts, task-stated
thresholds, missing documents), and is kept apart as a test set nobody tunes against.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pipeline.bench import dossier, filler, letters, notes, scenarios
from pipeline.bench.draft import Draft, Placement, field_values
from pipeline.core.anchors import contains_verbatim
from pipeline.core.case import Case, RequiredAnchor
from pipeline.core.domains import refer_if_unverified, rules_for
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, Trajectory
from pipeline.core.task import TaskSpec

DOMAINS = tuple(scenarios.SCENARIOS)
DEFAULT_SEED = 20260420


class Voice(StrEnum):
    """Who wrote the documents: the tuning set's templates, or the held-apart dossier style."""

    FORMS = "forms"
    DOSSIER = "dossier"
    NOTES = "notes"
    LETTERS = "letters"


@dataclass(frozen=True)
class GenerationSpec:
    """How many cases, how long, how hostile, how hard, in which voice."""

    domains: tuple[str, ...] = DOMAINS
    per_domain: int = 5
    seed: int = DEFAULT_SEED
    events: tuple[int, int] = (82, 96)
    chars: tuple[int, int] = (26_000, 28_000)
    adversarial: bool = False
    tenant: str = "bench"
    hard: bool = False  # more decoys and amendments, decisive facts late
    voice: Voice = Voice.FORMS


class GenerationError(DpmError):
    """A spec that cannot be met (unknown domain, impossible length)."""


@dataclass(frozen=True)
class _VoiceKit:
    """What a voice supplies: label spaces, drafts, noise and hostile text."""

    label_space: Callable[[str], tuple[str, ...] | None]
    draft: Callable[[random.Random, str, str, bool], Draft]
    filler: Callable[[random.Random, dt.date], tuple[str, str]]
    injection: Callable[[random.Random, str, Draft], str]
    pad: Callable[[random.Random, str], str]


_VOICES = {
    Voice.FORMS: _VoiceKit(
        scenarios.label_space, scenarios.draft, filler.filler_event, scenarios.injection, filler.pad
    ),
    Voice.DOSSIER: _VoiceKit(dossier.label_space, dossier.draft, dossier.filler, dossier.injection, filler.pad),
    Voice.NOTES: _VoiceKit(notes.label_space, notes.draft, notes.filler, notes.injection, notes.pad),
    Voice.LETTERS: _VoiceKit(letters.label_space, letters.draft, letters.filler, letters.injection, filler.pad),
}


def _interleave(
    rng: random.Random, core: list[tuple[str, str]], fillers: list[tuple[str, str]], placement: Placement
) -> tuple[list[tuple[str, str]], set[int]]:
    """Spreads core events among fillers in their order (an amendment after what it corrects).

    `placement` says where the core may go: early documents in the first part, late ones in the last.
    """
    total = len(core) + len(fillers)
    lo, hi = round(placement.start * total), round(placement.end * total)
    if hi - lo < len(core):
        lo, hi = 0, total
    slots = set(rng.sample(range(lo, hi), len(core)))
    ordered, core_iter, filler_iter = [], iter(core), iter(fillers)
    for index in range(total):
        ordered.append(next(core_iter) if index in slots else next(filler_iter))
    return ordered, slots


def _fit_length(rng: random.Random, events: list[tuple[str, str]], target: int, core: set[int],
                pad: Callable[[random.Random, str], str]) -> None:  # fmt: skip
    """Pads filler events until the trajectory reaches `target` characters."""
    fillers = [i for i in range(len(events)) if i not in core]
    total = sum(len(t) for _, t in events)
    while total < target and fillers:
        i = rng.choice(fillers)
        before = len(events[i][1])
        events[i] = (events[i][0], pad(rng, events[i][1]))
        total += len(events[i][1]) - before


def _events(
    rng: random.Random, spec: GenerationSpec, kit: _VoiceKit, domain: str, draft: Draft
) -> list[tuple[str, str]]:
    """The case's events: the draft's documents among the voice's noise, at the target length."""
    core = list(draft.documents)
    n_events = rng.randint(*spec.events)
    if n_events <= len(core):
        raise GenerationError(f"{n_events} events cannot hold {len(core)} core documents")
    start = dt.date(2026, 1, 5)
    fillers = [kit.filler(rng, start) for _ in range(n_events - len(core))]
    if spec.adversarial or draft.hostile:
        for i in rng.sample(range(len(fillers)), min(3, len(fillers))):
            fillers[i] = ("correspondence", fillers[i][1] + " " + kit.injection(rng, domain, draft))
    placement = Placement(0.4, 1.0) if spec.hard else draft.placement
    events, slots = _interleave(rng, core, fillers, placement)
    _fit_length(rng, events, rng.randint(*spec.chars), slots, kit.pad)
    return events


def generate_case(spec: GenerationSpec, domain: str, number: int) -> Case:
    """One case; the same (seed, voice, domain, number) always gives the same case, in any process."""
    rules = rules_for(domain)
    if rules is None or domain not in scenarios.SCENARIOS:
        raise GenerationError(f"no generator for domain {domain!r}; choose from {', '.join(DOMAINS)}")
    kit = _VOICES[spec.voice]
    salt = "" if spec.voice is Voice.FORMS else f"{spec.voice.value}:"
    rng = random.Random(f"{salt}{spec.seed}:{domain}:{number}")  # str seeds are hashed with SHA-512: stable
    label_space = kit.label_space(domain) or rules.label_space
    label = label_space[number % len(label_space)]  # balanced over the label space
    draft = kit.draft(rng, domain, label, spec.hard)
    task_text = draft.task or rules.task
    values = field_values(draft.values)
    stated = rules.policy(values, draft.limits) if draft.limits is not None else rules.verdict(values, task_text)
    verdict = refer_if_unverified(stated, label_space)
    if verdict.label != label:
        raise GenerationError(f"{spec.voice.value} draft for {domain} #{number} implies {verdict.label}, not {label}")
    events = _events(rng, spec, kit, domain, draft)
    prefix = "" if spec.voice is Voice.FORMS else f"{spec.voice.value}-"
    case_ref = CaseRef(spec.tenant, f"{prefix}{domain}-{spec.seed}-{number:03d}")
    trajectory = Trajectory(case_ref, tuple(Event(case_ref, i, k, t) for i, (k, t) in enumerate(events, start=1)))
    anchors = tuple(RequiredAnchor(key, draft.values[key]) for key in draft.anchor_keys(rules))
    for anchor in anchors:  # inversion's guarantee: every required anchor is derivable from the events
        if not any(contains_verbatim(e.text, anchor.value) or anchor.value in e.text for e in trajectory.events):
            raise GenerationError(f"{case_ref.key}: anchor {anchor.key}={anchor.value} is not in any event")
    return Case(
        trajectory=trajectory,
        task=TaskSpec(domain, task_text, label_space),
        label=label,
        required_anchors=anchors,
        compliance_provisions=tuple(p.ref for p in rules.provisions_for(label)),
        reasoning_points=verdict.reasons + verdict.findings,
    )


def generate_cases(spec: GenerationSpec) -> list[Case]:
    """`per_domain` cases for each domain, labels balanced over each domain's label space."""
    return [generate_case(spec, domain, n) for domain in spec.domains for n in range(spec.per_domain)]
