"""Reads what the workers published (decisions, views, audits) and the triggers, as typed records by decision id."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from pipeline.core.errors import DpmError
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.wire.audit import AuditRecord
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.rejection import RejectedError, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionId, DecisionRequest
from pipeline.wire.validation import validate
from pipeline.wire.view import ViewRecord

_LOG = logging.getLogger("pipeline.services.read_outputs")
_Record = TypeVar("_Record", DecisionRecord, ViewRecord, AuditRecord)


@dataclass
class PublishedOutputs:
    """Everything the workers published, decoded; `unreadable` counts records that are not valid wire forms."""

    decisions: dict[DecisionId, DecisionRecord] = field(default_factory=dict)
    views: dict[DecisionId, ViewRecord] = field(default_factory=dict)
    audits: dict[DecisionId, list[AuditRecord]] = field(default_factory=lambda: defaultdict(list))
    triggers: dict[str, DecisionRequest] = field(default_factory=dict)
    duplicates: int = 0
    unreadable: int = 0


def _records(config: dict[str, str], topic: str, schema: SchemaId, decode: Callable[..., _Record],
             outputs: PublishedOutputs) -> Iterator[_Record]:  # fmt: skip
    for raw in read_topic(config, topic):
        try:
            value = decode_object(raw.value, f"record at {topic} {raw.position}")
            validate(schema, value)
            yield decode(value)
        except DpmError as exc:  # a malformed record is a producer's bug; count it, never crash a reader
            _LOG.warning("skipped %s", exc)
            outputs.unreadable += 1


def load_outputs(client_config: dict[str, str], names: TopicNames, *, with_audits: bool = True) -> PublishedOutputs:
    """Reads the output topics to their ends; counts decision ids published more than once."""
    outputs = PublishedOutputs()
    for decision in _records(client_config, names.decisions, SchemaId.DECISION, DecisionRecord.from_wire, outputs):
        if decision.decision_id in outputs.decisions:
            outputs.duplicates += 1
        outputs.decisions[decision.decision_id] = decision
    for view in _records(client_config, names.views, SchemaId.VIEW, ViewRecord.from_wire, outputs):
        outputs.views[view.decision_id] = view
    if with_audits:
        for audit in _records(client_config, names.audit, SchemaId.AUDIT, AuditRecord.from_wire, outputs):
            outputs.audits[audit.decision_id].append(audit)
    for raw in read_topic(client_config, names.triggers):
        try:
            trigger = DecisionRequest.decode(raw.value)
        except RejectedError:
            continue  # refused triggers are in the dead-letter topic, not decisions
        outputs.triggers[trigger.trigger_id] = trigger
    return outputs


def await_decisions(
    client_config: dict[str, str],
    names: TopicNames,
    expected: int,
    timeout_s: float,
    progress: Callable[[int], None] | None = None,
) -> PublishedOutputs:
    """Polls the output topics (read_committed) until `expected` distinct decisions, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = load_outputs(client_config, names)
        if progress is not None:
            progress(len(outputs.decisions))
        if len(outputs.decisions) >= expected or time.monotonic() > deadline:
            return outputs
        time.sleep(1.0)
