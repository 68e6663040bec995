"""Reads what the workers published (decisions, views, audits) and the triggers, as typed records by tenant and id."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from pipeline.core.errors import DpmError
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.wire.audit import AuditRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.rejection import RejectedError, decode_object
from pipeline.wire.sealing import SEALED, CaseCipher, CaseErasedError, case_of, open_body
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest, TriggerLimits
from pipeline.wire.view import ViewRecord

_LOG = logging.getLogger("pipeline.services.read_outputs")
OutputRecord = TypeVar("OutputRecord", DecisionRecord, ViewRecord, AuditRecord)  # what the workers publish


@dataclass
class PublishedOutputs:
    """Everything the workers published, decoded, by tenant and decision id (DecisionKey).

    `triggers` are by tenant and trigger id; `unreadable` counts records that are not valid wire forms.
    """

    decisions: dict[DecisionKey, DecisionRecord] = field(default_factory=dict)
    views: dict[DecisionKey, ViewRecord] = field(default_factory=dict)
    audits: dict[DecisionKey, list[AuditRecord]] = field(default_factory=lambda: defaultdict(list))
    triggers: dict[tuple[str, str], DecisionRequest] = field(default_factory=dict)
    # Decisions of erased cases: their content is sealed under a destroyed key; only ids remain.
    erased: dict[DecisionKey, CaseRef] = field(default_factory=dict)
    erased_ms: dict[DecisionKey, int] = field(default_factory=dict)  # when each was published
    sealed: set[DecisionKey] = field(default_factory=set)  # decisions whose record was sealed (read by a lookup)
    duplicates: int = 0
    unreadable: int = 0

    def absorb(self, other: PublishedOutputs) -> None:
        """Adds what another set of topics published (a tenant's own, with tenancy by topic); keys never collide."""
        self.decisions |= other.decisions
        self.views |= other.views
        for key, audits in other.audits.items():
            self.audits[key].extend(audits)
        self.triggers |= other.triggers
        self.erased |= other.erased
        self.erased_ms |= other.erased_ms
        self.duplicates += other.duplicates
        self.unreadable += other.unreadable

    def decision_ids(self) -> set[DecisionId]:
        """The ids decided, whatever their tenant (for a reader of one tenant's pipeline)."""
        return {key.decision_id for key in self.decisions}


# Readers take every trigger the schema admits; what a worker accepts is the worker's business.
_READ_ANY = TriggerLimits(max_positions=100_000, domains=None)


class Opened(NamedTuple, Generic[OutputRecord]):
    """An output record decoded and opened, the raw record it came from, and whether it was sealed."""

    raw: RawRecord
    record: OutputRecord
    sealed: bool


def decoded(raws: Iterable[RawRecord], topic: str, decode: Callable[[Mapping[str, Any]], OutputRecord],
            outputs: PublishedOutputs, cipher: CaseCipher | None) -> Iterator[Opened[OutputRecord]]:  # fmt: skip
    """Output records decoded and opened, each with the raw record it came from.

    One that does not decode is counted in `outputs.unreadable`, never crashes the reader. The
    workers built these records from typed objects, so a reader only decodes: validating every
    audit record against its schema would cost more CPU than making the decision. A record of an
    erased case is listed in `outputs.erased` by its clear decision id, without content.
    """
    for raw in raws:
        body: dict[str, Any] = {}
        try:
            body = decode_object(raw.value, f"record at {topic} {raw.position}")
            yield Opened(raw, decode(open_body(body, cipher)), SEALED in body)
        except CaseErasedError as exc:
            case = exc.case or case_of(body)
            key = DecisionKey(case.tenant, DecisionId.parse(str(body.get("decision_id"))))
            outputs.erased.setdefault(key, case)
            outputs.erased_ms.setdefault(key, raw.timestamp_ms or 0)
        except (DpmError, KeyError, TypeError, ValueError) as exc:
            _LOG.warning("skipped an unreadable record at %s %s: %r", topic, raw.position, exc)
            outputs.unreadable += 1


def _records(config: dict[str, str], topic: str, decode: Callable[[Mapping[str, Any]], OutputRecord],
             outputs: PublishedOutputs, cipher: CaseCipher | None) -> Iterator[OutputRecord]:  # fmt: skip
    """Every record of an output topic, decoded and opened (see `decoded`)."""
    return (opened.record for opened in decoded(read_topic(config, topic), topic, decode, outputs, cipher))


def _decisions(config: dict[str, str], names: TopicNames, outputs: PublishedOutputs, cipher: CaseCipher | None) -> None:
    """The first committed decision of each tenant's id; later ones (an id sent twice) are counted, not kept."""
    for decision in _records(config, names.decisions, DecisionRecord.from_wire, outputs, cipher):
        if decision.key in outputs.decisions:
            outputs.duplicates += 1
            continue
        outputs.decisions[decision.key] = decision


def load_outputs(
    client_config: dict[str, str],
    names: TopicNames,
    *,
    cipher: CaseCipher | None,
    with_audits: bool = True,
    with_triggers: bool = True,
) -> PublishedOutputs:
    """Reads the output topics to their ends: one decision, view and audit trail per decision id.

    A worker refuses a trigger id it committed recently (dead letter `duplicate`), but one sent
    again after a rebalance or beyond that window is decided twice; readers keep the first
    committed records of each tenant's id, so compare, replay and every report see each decision once,
    and `duplicates` says how many were set aside. Sealed content is opened with `cipher`. Without
    `with_triggers` the triggers topic is not read (a tenant's principal may only write it).
    """
    outputs = PublishedOutputs()
    if cipher is not None:
        cipher.sync()
    _decisions(client_config, names, outputs, cipher)
    for view in _records(client_config, names.views, ViewRecord.from_wire, outputs, cipher):
        outputs.views.setdefault(view.key, view)
    if with_audits:
        seen: set[tuple[DecisionKey, int]] = set()
        for audit in _records(client_config, names.audit, AuditRecord.from_wire, outputs, cipher):
            if (audit.key, audit.call_index) not in seen:
                seen.add((audit.key, audit.call_index))
                outputs.audits[audit.key].append(audit)
    for raw in read_topic(client_config, names.triggers) if with_triggers else ():
        try:
            trigger = DecisionRequest.decode(raw.value, limits=_READ_ANY)
        except RejectedError:
            continue  # refused triggers are in the dead-letter topic, not decisions
        outputs.triggers[(trigger.case.tenant, trigger.trigger_id)] = trigger
    return outputs


def await_decisions(
    client_config: dict[str, str],
    names: TopicNames,
    expected: int,
    timeout_s: float,
    *,
    cipher: CaseCipher | None,
    progress: Callable[[int], None] | None = None,
) -> PublishedOutputs:
    """Polls the decisions topic (read_committed) until `expected` distinct decisions, or the timeout.

    Only decisions are read while waiting; every output topic is read once at the end.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        decided = PublishedOutputs()
        if cipher is not None:
            cipher.sync()
        _decisions(client_config, names, decided, cipher)
        if progress is not None:
            progress(len(decided.decisions))
        if len(decided.decisions) >= expected or time.monotonic() > deadline:
            return load_outputs(client_config, names, cipher=cipher)
        time.sleep(1.0)
