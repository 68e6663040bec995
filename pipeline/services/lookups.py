"""One decision, or one case's decisions, read through the lookup index (kafka/reading/output_index.py).

What `load_outputs` gives for every decision, given for the ones asked: a lookup reads the index,
then the records at their places, so its cost does not grow with the output topics.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.config.settings import Settings
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.index_store import Entry
from pipeline.kafka.reading.output_index import CatchUpReport, OutputIndex
from pipeline.kafka.reading.places import PlaceReader
from pipeline.services.read_outputs import PublishedOutputs, decoded
from pipeline.wire.audit import AuditRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import DecisionId, DecisionKey
from pipeline.wire.view import ViewRecord


def open_index(settings: Settings, names: TopicNames, client_config: dict[str, str] | None = None,
               reader: PlaceReader | None = None, report: CatchUpReport | None = None) -> OutputIndex:  # fmt: skip
    """The lookup index of `names`' output topics on this host (made on first use; caught up on a miss).

    Its records are read through `reader` when given (shared; its owner closes it); its catch-ups
    are told to `report` when given (a command's progress bar).
    """
    config = client_config or settings.kafka.client_config()
    return OutputIndex(config, names, settings.index_dir(), reader, report)


def published_decision(
    index: OutputIndex,
    decision_id: DecisionId,
    tenant: str | None,
    cipher: CaseCipher | None,
    *,
    with_audits: bool = True,
) -> PublishedOutputs:
    """The decision `decision_id` of `tenant` (of every tenant that used it, for None), as load_outputs has it.

    Only its records are read: its decision, its view and (with `with_audits`) its audit records.
    A decision of an erased case is in `erased`, by id and case; an id the index does not know
    after catching up is in none of the maps.
    """
    return published(index, index.entries(str(decision_id), tenant), cipher, with_audits=with_audits)


def case_decisions(
    index: OutputIndex, case: CaseRef, after: str | None = None, limit: int | None = None
) -> list[Entry] | None:
    """The case's decided entries, oldest first, after indexing what was published since the last look.

    A page: after the decision id `after` (the last of the page before), at most `limit`; None when
    `after` is none of the case's decisions.
    """
    index.catch_up()
    return index.store.of_case(case.tenant, case.case_id, after, -1 if limit is None else limit)


def published(
    index: OutputIndex, entries: Iterable[Entry], cipher: CaseCipher | None, *, with_audits: bool = True
) -> PublishedOutputs:
    """The records of `entries`, read at their places and opened, in a PublishedOutputs."""
    outputs = PublishedOutputs()
    live: list[Entry] = []
    for entry in entries:
        if entry.erased and entry.case_id is not None:
            key = DecisionKey(entry.tenant, DecisionId.parse(entry.decision_id))
            outputs.erased[key] = CaseRef(entry.tenant, entry.case_id)
        elif entry.complete:
            live.append(entry)
    if live:
        _read_entries(index, live, outputs, cipher, with_audits=with_audits)
    # Kept in the index only when the key topic says so (a tombstone or an erased marker read): a record that
    # does not open for another reason (no keys here, a KEK file missing on this host) is not an erasure.
    erased = {case for case in set(outputs.erased.values()) if cipher is not None and cipher.erased(case)}
    for tenant in {case.tenant for case in erased}:
        index.mark_erased(tenant, [c.case_id for c in erased if c.tenant == tenant])
    return outputs


def _read_entries(index: OutputIndex, live: list[Entry], outputs: PublishedOutputs, cipher: CaseCipher | None,
                  *, with_audits: bool) -> None:  # fmt: skip
    """Reads and opens the records of complete entries into `outputs` (one read for all of them)."""
    names = index.names
    places = [(names.decisions, e.decision) for e in live if e.decision is not None]
    places += [(names.views, e.view) for e in live if e.view is not None]
    if with_audits:
        places += [(names.audit, where) for e in live for _, where in e.audits]
    records = index.read(places)
    if cipher is not None:  # after the read: the keys' news are asked on the connection the read opened
        cipher.sync()

    def at(topic: str, where: int | None) -> list[RawRecord]:
        found = records.get((topic, where)) if where is not None else None
        return [] if found is None else [found]

    for entry in live:
        for opened in decoded(at(names.decisions, entry.decision), names.decisions, DecisionRecord.from_wire,
                              outputs, cipher):  # fmt: skip
            outputs.decisions.setdefault(opened.record.key, opened.record)
            if opened.sealed:
                outputs.sealed.add(opened.record.key)
        for view in decoded(at(names.views, entry.view), names.views, ViewRecord.from_wire, outputs, cipher):
            outputs.views.setdefault(view.record.key, view.record)
        for call_index, where in entry.audits if with_audits else ():
            for audit in decoded(at(names.audit, where), names.audit, AuditRecord.from_wire, outputs, cipher):
                if audit.record.call_index == call_index:
                    outputs.audits[audit.record.key].append(audit.record)
