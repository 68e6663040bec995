"""Appending cases and events to the log, and requesting decisions for them (what `dpm produce|trigger` do)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from itertools import groupby
from statistics import fmean
from typing import Any

import orjson

from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.task import Architecture, TaskSpec, resolve_budget
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.writing.producer import EventProducer
from pipeline.services.tenants import topics_of
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest


class ManifestError(DpmError):
    """A manifest is unreadable or is not what `dpm produce --manifest` writes."""


@dataclass(frozen=True)
class ManifestEntry:
    """One produced case: where its events are, its task, its length and its label (for accuracy)."""

    case: CaseRef
    task: TaskSpec
    label: str | None
    chars: int
    positions: tuple[LogPosition, ...]

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.case.tenant, "case_id": self.case.case_id, "label": self.label, "chars": self.chars,
                "task": self.task.wire(), "positions": [[p.partition, p.offset] for p in self.positions]}  # fmt: skip

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ManifestEntry:
        return cls(CaseRef(raw["tenant"], raw["case_id"]), TaskSpec.from_wire(raw["task"]), raw.get("label"),
                   int(raw["chars"]), tuple(LogPosition(p, o) for p, o in raw["positions"]))  # fmt: skip


def read_manifest(data: bytes) -> list[ManifestEntry]:
    """The case entries of a manifest (entries for loose event files carry no case and are skipped)."""
    try:
        return [ManifestEntry.from_json(e) for e in orjson.loads(data) if "case_id" in e]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, DpmError) as exc:
        raise ManifestError(f"not a manifest of `dpm produce --manifest`: {exc}") from exc


class _Producers:
    """`tenant -> producer` for the tenant's topics (its own, or the shared ones), each made on first use.

    Each seals events under their cases' data keys unless DPM_ENCRYPTION is off; `topics` names the
    topics written, so a command says where its records went.
    """

    def __init__(self, settings: Settings, stack: ExitStack) -> None:
        self._settings, self._stack = settings, stack
        self._made: dict[str, EventProducer] = {}  # by topic scope: one for the shared topics, or one per tenant
        self.topics: list[str] = []

    def __call__(self, tenant: str) -> EventProducer:
        settings, topics = self._settings, topics_of(self._settings, tenant)
        if topics.scope not in self._made:
            keys = (self._stack.enter_context(closing(case_keys_from(settings, names=topics)))
                    if settings.keys.encryption else None)  # fmt: skip
            self._made[topics.scope] = self._stack.enter_context(
                closing(EventProducer(settings.kafka.client_config(), topics, keys)))  # fmt: skip
        return self._made[topics.scope]

    def wrote(self, tenant: str, topic: Callable[[TopicNames], str]) -> None:
        name = topic(self(tenant).inputs)
        if name not in self.topics:
            self.topics.append(name)


@contextmanager
def _producers(settings: Settings) -> Iterator[_Producers]:
    with ExitStack() as stack:
        yield _Producers(settings, stack)


@dataclass(frozen=True)
class Produced:
    """What an append wrote: each case's manifest entry (or the loose events' positions), and the topics written."""

    entries: tuple[ManifestEntry, ...]
    positions: tuple[LogPosition, ...]
    topics: tuple[str, ...]


def produce_cases(settings: Settings, cases: Sequence[Case], summ_budgets: tuple[int, ...]) -> Produced:
    """Appends every case's events (its task and the baseline's budgets ride on seq 1)."""
    with _producers(settings) as producer_for:
        entries = []
        for case in cases:
            opening = CaseOpening(case.task, summ_budgets)
            positions = producer_for(case.ref.tenant).append(case.trajectory.events, opening)
            producer_for.wrote(case.ref.tenant, _events_topic)
            entries.append(ManifestEntry(case.ref, case.task, case.label, case.trajectory.char_length,
                                         tuple(positions)))  # fmt: skip
        return Produced(tuple(entries), tuple(p for e in entries for p in e.positions), tuple(producer_for.topics))


def produce_events(settings: Settings, events: Sequence[Event]) -> Produced:
    """Appends loose events (no case opening); their positions are in the order given."""
    with _producers(settings) as producer_for:
        positions: list[LogPosition] = []
        for tenant, run in groupby(events, key=lambda e: e.case.tenant):  # one batch per run of one tenant's events
            positions += producer_for(tenant).append(list(run))
            producer_for.wrote(tenant, _events_topic)
        return Produced((), tuple(positions), tuple(producer_for.topics))


def _events_topic(names: TopicNames) -> str:
    return names.events


def manifest_requests(
    entries: Sequence[ManifestEntry], budget: str, architectures: tuple[Architecture, ...]
) -> list[DecisionRequest]:
    """One request per case, with its positions; a named budget is a share of the cases' mean length."""
    mean_chars = fmean(e.chars for e in entries) if entries else 0.0
    _, chars = resolve_budget(budget, mean_chars)
    return [
        DecisionRequest(
            uuid.uuid4().hex, e.case, e.task, chars.chars, architectures, e.positions, len(e.positions), e.label
        )
        for e in entries
    ]


def case_request(
    case: CaseRef, task: TaskSpec, budget: str, architectures: tuple[Architecture, ...]
) -> DecisionRequest:
    """A request without positions: the worker scans the case's partition."""
    if not budget.isdigit():
        raise DpmError("without a manifest the case length is unknown: give --budget in characters")
    _, chars = resolve_budget(budget, 0.0)
    return DecisionRequest(uuid.uuid4().hex, case, task, chars.chars, architectures)


def send_triggers(settings: Settings, requests: Sequence[DecisionRequest]) -> None:
    """Publishes each request on its tenant's triggers topic (the shared one, or its own), in order."""
    with _producers(settings) as producer_for:
        for request in requests:
            producer_for(request.case.tenant).trigger(request)
