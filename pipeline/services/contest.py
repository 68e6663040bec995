"""Contesting a published decision: what-ifs, decisive events and adverse-action reasons, recorded and replayed.

A contest reads the decision, its view, its audit records and the events at its recorded offsets, exactly as
replay does, re-decides over the changed log (core/contest.py) with the decision's own backend, and
publishes what it found as a contest record (wire/contest.py) on the scope's contests topic. The contested
decision is never touched; an erased case or a changed log is refused before any model call.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.contest import (
    AdverseReasons,
    Answer,
    CallBudgetError,
    Contested,
    ContestError,
    Decisive,
    EventChange,
    ReusingBackend,
    WhatIf,
    answering_from,
    decisive_events,
    leave_out,
    principal_reasons,
    what_if,
)
from pipeline.core.domains import referral_label, rules_for
from pipeline.core.errors import DpmError
from pipeline.core.event_log import RawRecord
from pipeline.core.events import Event, InvalidEventError, Trajectory
from pipeline.core.hashing import events_digest
from pipeline.core.model import ModelBackendError
from pipeline.core.run import ModelCall
from pipeline.core.verification import ReplayReport, ReplayStatus
from pipeline.core.view import MemoryView
from pipeline.kafka.cluster.admin import topic_exists
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.processing.steps import max_record_bytes
from pipeline.kafka.reading.index_store import ContestEntry
from pipeline.kafka.reading.output_index import CatchUpReport, OutputIndex
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.one_record import produce_one
from pipeline.services.lookups import open_index, published_decision
from pipeline.services.replay import LogChangedError, read_recorded_events, registry_backends, select_decisions
from pipeline.services.tenants import topic_scopes
from pipeline.wire.audit import calls_in_order
from pipeline.wire.contest import (
    Asker,
    ContestKind,
    ContestPart,
    ContestRecord,
    ContestTooLargeError,
    Run,
    decisive_outcome,
    new_contest_id,
    reasons_outcome,
    usage_of,
    whatif_outcome,
)
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.event import EventRecord
from pipeline.wire.headers import standard_headers
from pipeline.wire.rejection import RejectedError
from pipeline.wire.sealing import CaseCipher, CaseErasedError
from pipeline.wire.trigger import DecisionId, InvalidDecisionIdError

SOURCE = "/dpm/contest"
DEFAULT_MAX_CALLS = 200  # a decisive analysis of a 100-fact view on the offline backend stays well within it


class ContestRefusedError(DpmError):
    """The decision cannot be contested as asked (unknown, erased, its log changed): nothing was computed."""


class NotAdverseError(ContestRefusedError):
    """Reasons were asked of a decision its domain does not mark adverse."""


# The case keys of a scope (the shared topics', or a tenant's own).
CipherFor = Callable[[TopicNames], CaseCipher | None]


@dataclass(frozen=True)
class Found:
    """A published decision ready to be contested: where it is, what it read, and its recorded calls."""

    scope: TopicNames
    record: DecisionRecord
    contested: Contested
    calls: tuple[ModelCall, ...]


def asker(settings: Settings, why: str) -> Asker:
    """Who asks: the cluster principal this command authenticates as, else the operating-system user."""
    user = settings.kafka.client_config().get("sasl.username")
    return Asker(f"User:{user}" if user else f"os:{getpass.getuser()}", int(time.time() * 1000), why)


def find_decision(settings: Settings, decision: str, tenant: str | None, cipher_for: CipherFor,
                  report: CatchUpReport | None = None) -> Found:  # fmt: skip
    """The published decision `decision` (of `tenant`, when several tenants used the id), with its events read.

    Found through the lookup index, whose catch-ups are told to `report` when given.
    """
    try:
        wanted = DecisionId.parse(decision)
    except InvalidDecisionIdError as exc:
        raise ContestRefusedError(f"{decision!r} is not <trigger id>:<architecture>") from exc
    config = settings.kafka.client_config()
    for scope in topic_scopes(settings, tenant):
        cipher = cipher_for(scope)
        with closing(open_index(settings, scope, config, report=report)) as index:
            outputs = published_decision(index, wanted, tenant, cipher)
        erased = [case for key, case in outputs.erased.items()
                  if key.decision_id == wanted and tenant in (None, case.tenant)]  # fmt: skip
        if erased:
            raise ContestRefusedError(f"decision {decision} is of an erased case ({erased[0].key}): ERASED, "
                                      f"nothing computed")  # fmt: skip
        chosen = select_decisions(outputs.decisions.values(), decision=decision, tenant=tenant)
        if len(chosen) > 1:
            tenants = ", ".join(sorted(r.case.tenant for r in chosen))
            raise ContestRefusedError(f"decision {decision} was made for several tenants ({tenants}): say whose with "
                                      f"--tenant")  # fmt: skip
        if chosen:
            record = chosen[0]
            view = outputs.views.get(record.key)
            if view is None:
                raise ContestRefusedError(f"decision {decision} has no published view to contest")
            return Found(scope, record, _contested(config, scope, record, view.view, cipher),
                         tuple(calls_in_order(outputs.audits.get(record.key, []))))  # fmt: skip
    raise ContestRefusedError(f"no published decision {decision}" + (f" of tenant {tenant}" if tenant else ""))


def _contested(config: dict[str, str], scope: TopicNames, record: DecisionRecord, view: MemoryView,
               cipher: CaseCipher | None) -> Contested:  # fmt: skip
    topic = record.events_topic or scope.of_generation(1).events  # as replay reads it (cli/inspect.py)
    with closing(KafkaEventLog(config, topic)) as log:
        try:
            trajectory = read_recorded_events(record, log, cipher)
        except LogChangedError as exc:
            raise ContestRefusedError(f"the recorded offsets of {record.decision_id} now hold other records "
                                      f"(LOG-CHANGED): {exc}") from exc  # fmt: skip
    return contested_of(record, view, trajectory)


def contested_of(record: DecisionRecord, view: MemoryView, trajectory: Trajectory | None) -> Contested:
    """The decision as a contest takes it, from the events at its offsets (None: the case is erased).

    Refused when the events are gone or are no longer what the decision read.
    """
    if trajectory is None:
        raise ContestRefusedError(f"decision {record.decision_id} is of an erased case: ERASED, nothing computed")
    if events_digest(trajectory.events) != record.events_sha256:
        raise ContestRefusedError(f"the events of {record.decision_id} no longer match its digest (LOG-CHANGED)")
    outcome = record.outcome
    return Contested(record.replay_target(), trajectory, view, outcome.label, outcome.notice or "")


def _backend(settings: Settings, found: Found, max_calls: int | None) -> ReusingBackend:
    """The decision's own backend (its recorded id), answering what the record holds from the record."""
    inner = registry_backends(settings.model, None)(found.record, found.calls)
    return ReusingBackend(inner, found.calls, max_calls)


def _record(found: Found, kind: ContestKind, *, who: Asker, backend: ReusingBackend, runs: Sequence[WhatIf],
            outcome: dict[str, object], changes: Sequence[EventChange] = ()) -> ContestRecord:  # fmt: skip
    return ContestRecord(
        contest_id=new_contest_id(), kind=kind, case=found.record.case, decision_id=found.record.decision_id,
        asker=who, backend=found.record.backend, model=found.record.model, changes=tuple(changes),
        runs=tuple(Run.of(r) for r in runs), answers=backend.answers, outcome=outcome,
        usage=usage_of(runs, backend.asked, backend.reused, backend.max_calls),
    )  # fmt: skip


def contest_whatif(settings: Settings, found: Found, changes: Sequence[EventChange], who: Asker,
                   max_calls: int | None) -> tuple[WhatIf, ContestRecord]:  # fmt: skip
    """Re-decides the decision with `changes`; over the call budget it raises CallBudgetError (nothing published)."""
    for change in changes:
        if not change.left_out:  # a replacement must be an event the case's log could hold
            try:
                event = Event(found.record.case, change.index, str(change.kind), str(change.text))
                EventRecord.from_wire(EventRecord(event).to_wire())
            except (RejectedError, InvalidEventError) as exc:
                why = exc.detail if isinstance(exc, RejectedError) else str(exc)
                raise ContestRefusedError(f"the replacement of event [{change.index}] is not a valid event: "
                                          f"{why}") from exc  # fmt: skip
    backend = _backend(settings, found, max_calls)
    try:
        outcome = what_if(found.contested, changes, backend)
    except ModelBackendError as exc:
        raise ContestError(f"the model could not answer the what-if: {exc}") from exc
    return outcome, _record(found, ContestKind.WHATIF, who=who, backend=backend, runs=[outcome],
                            outcome=whatif_outcome(outcome), changes=changes)  # fmt: skip


def contest_decisive(settings: Settings, found: Found, who: Asker,
                     max_calls: int) -> tuple[Decisive, ContestRecord]:  # fmt: skip
    """The decision's decisive events, as far as `max_calls` new model calls allow."""
    backend = _backend(settings, found, max_calls)
    try:
        decisive = decisive_events(found.contested, backend)
    except ModelBackendError as exc:
        raise ContestError(f"the model could not answer the analysis: {exc}") from exc
    return decisive, _record(found, ContestKind.DECISIVE, who=who, backend=backend, runs=decisive.runs,
                             outcome=decisive_outcome(decisive))  # fmt: skip


def is_adverse_label(record: DecisionRecord) -> bool:
    """Whether the decision's domain marks its label adverse: a negative label, or a referral for more evidence."""
    label, task = record.outcome.label, record.task
    rules = rules_for(task.domain)
    negative = rules.negative_labels if rules is not None else ()
    return label is not None and (label in negative or label == referral_label(task.label_space))


def contest_reasons(settings: Settings, found: Found, who: Asker,
                    max_calls: int) -> tuple[AdverseReasons, ContestRecord]:  # fmt: skip
    """The principal reasons of an adverse decision; ContestRefusedError for one its domain does not mark adverse."""
    if not is_adverse_label(found.record):
        raise NotAdverseError(f"decision {found.record.decision_id} is {found.contested.label}, which its domain "
                              f"({found.record.task.domain}) does not mark adverse: it owes no reasons")  # fmt: skip
    rules = rules_for(found.record.task.domain)
    heading = rules.reasons_heading if rules is not None else "Principal reasons for the decision"
    backend = _backend(settings, found, max_calls)
    try:
        reasons = principal_reasons(found.contested, heading, backend)
    except ModelBackendError as exc:
        raise ContestError(f"the model could not answer the analysis: {exc}") from exc
    return reasons, _record(found, ContestKind.REASONS, who=who, backend=backend, runs=reasons.runs,
                            outcome=reasons_outcome(reasons))  # fmt: skip


def require_contests_topic(settings: Settings, scope: TopicNames) -> None:
    """Refuses clearly, before any model call, where the scope has no contests topic to record a contest on."""
    topic = scope.contests
    if not topic_exists(settings.kafka.client_config(), topic):
        raise ContestRefusedError(f"{topic} does not exist: `dpm topics create` (or `dpm tenants add` for a tenant's "
                                  f"own topics) adds it to a pipeline made before contests were recorded")  # fmt: skip


# Room each record leaves for its headers and the broker's framing, beside its key and value.
_HEADROOM_BYTES = 4_096


def publish_contest(settings: Settings, found: Found, record: ContestRecord, cipher: CaseCipher | None) -> None:
    """Publishes the contest on the scope's contests topic (its callers check it exists before computing).

    A contest too large for one record goes out as its parts, each written and acknowledged before the
    next and the head last: a reader that finds the head finds every part it lists. A failure part-way
    leaves parts no head lists, which readers pass over.
    """
    config = settings.kafka.client_config()
    try:
        records = record.encoded(cipher, max_record_bytes(config) - _HEADROOM_BYTES)
    except ContestTooLargeError as exc:
        raise ContestError(f"the contest cannot be recorded: {exc.detail}") from exc
    for encoded in records:
        headers = standard_headers(encoded.schema, source=SOURCE, tenant=record.case.tenant,
                                   event_id=encoded.event_id)  # fmt: skip
        produce_one(config, found.scope.contests, encoded.key, encoded.value, headers)


@dataclass(frozen=True)
class ContestLine:
    """A published contest of a decision, replayed: MATCH when every re-decision reproduces its label and view."""

    contest_id: str
    kind: ContestKind | None  # None: erased, its content unreadable
    report: ReplayReport


def read_contests(index: OutputIndex, found: Found, cipher: CaseCipher | None) -> list[ContestLine]:
    """Every contest of the found decision (`index` is its scope's), each replayed from its record and parts.

    Only its contests are read, at their indexed places; each is replayed from its recorded answers
    (no model call).
    """
    scope, record = found.scope, found.record
    entries = index.contests(str(record.decision_id), record.case.tenant)
    heads = [(scope.contests, e.head) for e in entries]
    read = index.read(heads + [(scope.contests, where) for e in entries for _, where in e.parts])
    lines = []
    for entry in entries:
        head = read.get((scope.contests, entry.head))
        if entry.erased or head is None:
            lines.append(ContestLine(entry.contest_id, None, ReplayReport(ReplayStatus.ERASED, "the case is erased")))
            continue
        lines.append(_replayed_contest(entry, head.value, [read.get((scope.contests, w)) for _, w in entry.parts],
                                       found, cipher))  # fmt: skip
    return lines


def _replayed_contest(entry: ContestEntry, head: bytes | None, parts: Sequence[RawRecord | None], found: Found,
                      cipher: CaseCipher | None) -> ContestLine:  # fmt: skip
    """One contest read back (a part that cannot be read is missing to its head, which says so) and replayed."""
    joined: dict[int, ContestPart] = {}
    for raw in parts:
        try:
            part = ContestPart.decode(None if raw is None else raw.value, cipher)
        except RejectedError:
            continue
        joined[part.part] = part
    try:
        record = ContestRecord.decode(head, cipher).joined(joined)
    except CaseErasedError:
        return ContestLine(entry.contest_id, None, ReplayReport(ReplayStatus.ERASED, "the case is erased"))
    except RejectedError as exc:
        return ContestLine(entry.contest_id, None, ReplayReport(ReplayStatus.DRIFT, f"unreadable: {exc}"))
    return ContestLine(record.contest_id, record.kind, replay_contest(record, found))


def replay_contest(record: ContestRecord, found: Found) -> ReplayReport:
    """Runs each of the contest's re-decisions again from the recorded answers alone and compares labels and views."""
    replacements = {c.index: c for c in record.changes if not c.left_out}
    recorded: tuple[ModelCall | Answer, ...] = (*found.calls, *record.answers)
    for n, run in enumerate(record.runs, start=1):
        changes = (*leave_out(*run.left_out), *(replacements[i] for i in run.replaced))
        try:  # each request is built again from the log and the changes; its digest finds the recorded answer
            again = Run.of(what_if(found.contested, changes, answering_from(recorded)))
        except (ModelBackendError, CallBudgetError, ContestError, KeyError) as exc:
            return ReplayReport(ReplayStatus.DRIFT, f"re-decision {n} of {len(record.runs)} cannot be rerun: {exc}")
        if again != run:
            return ReplayReport(ReplayStatus.DRIFT, f"re-decision {n} of {len(record.runs)} gives {again.label} "
                                                    f"(view {again.view_sha256[:12]}), recorded {run.label} "
                                                    f"(view {run.view_sha256[:12]})")  # fmt: skip
    return ReplayReport(ReplayStatus.MATCH, f"{len(record.runs)} re-decision(s) reproduced from the record")


def keys_for(settings: Settings) -> tuple[CipherFor, Callable[[], None]]:
    """A cipher per scope, opened as needed, and the function that closes them all."""
    opened: dict[str, CaseCipher] = {}
    closers: list[Callable[[], None]] = []

    def cipher_for(scope: TopicNames) -> CaseCipher | None:
        if scope.scope not in opened:
            keys = case_keys_from(settings, names=scope, by_case=True)  # one decision's case: its key alone
            opened[scope.scope] = keys
            closers.append(keys.close)
        return opened[scope.scope]

    def close() -> None:
        for closer in closers:
            closer()

    return cipher_for, close


@dataclass(frozen=True)
class ContestAsk:
    """What is asked of a decision: a what-if (with its changes), a decisive analysis, or its reasons."""

    kind: ContestKind
    who: Asker
    max_calls: int = DEFAULT_MAX_CALLS
    changes: tuple[EventChange, ...] = ()


@dataclass(frozen=True)
class ContestDone:
    """A contest made, ready to publish: its record, and what it found (one of the three, by its kind)."""

    record: ContestRecord
    whatif: WhatIf | None = None
    decisive: Decisive | None = None
    reasons: AdverseReasons | None = None


def run_contest(settings: Settings, found: Found, ask: ContestAsk) -> ContestDone:
    """Makes the contest asked for (nothing is published: see publish_contest)."""
    if ask.kind is ContestKind.WHATIF:
        outcome, record = contest_whatif(settings, found, ask.changes, ask.who, ask.max_calls)
        return ContestDone(record, whatif=outcome)
    if ask.kind is ContestKind.DECISIVE:
        decisive, record = contest_decisive(settings, found, ask.who, ask.max_calls)
        return ContestDone(record, decisive=decisive)
    reasons, record = contest_reasons(settings, found, ask.who, ask.max_calls)
    return ContestDone(record, reasons=reasons)
