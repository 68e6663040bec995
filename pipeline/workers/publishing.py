"""What both workers write: a run's records as Kafka outputs, dead letters, and the metrics of a decision."""

from __future__ import annotations

import time
from typing import Any

import orjson

from pipeline.core.event_log import RawRecord
from pipeline.core.run import RunResult
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.transactions import Output
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.headers import REASON_HEADER
from pipeline.wire.rejection import Rejection
from pipeline.wire.run_records import RunRecords
from pipeline.wire.sealing import CaseCipher, seal_body


def run_outputs(published: RunRecords, names: TopicNames, cipher: CaseCipher | None) -> list[Output]:
    """The view, the decision and the audit records as output messages, keyed by decision id.

    With a cipher, their case content is sealed under the case's data key (digests stay in clear).
    """
    key = str(published.decision_id).encode()

    def value(body: dict[str, Any]) -> bytes:
        return orjson.dumps(seal_body(body, cipher))

    return [
        Output(names.views, key, value(published.view.to_wire())),
        Output(names.decisions, key, value(published.decision.to_wire())),
        *(Output(names.audit, key, value(a.to_wire())) for a in published.audits),
    ]


def observe_published(
    metrics: PipelineMetrics,
    result: RunResult,
    published: RunRecords,
    *,
    triggered_ms: int | None,
    calls_counted_already: int = 0,
) -> None:
    """Counts a decision, and checks (without a model call) that its recorded answers reproduce its view."""
    end_to_end = time.time() - triggered_ms / 1000 if triggered_ms else None
    tenant = published.decision.case.tenant
    metrics.observe_run(result, tenant, end_to_end, calls_counted_already=calls_counted_already)
    metrics.replays.labels(published.self_check().status.value).inc()


def dead_letter(
    names: TopicNames, record: RawRecord, *, source_topic: str, reason: Rejection, detail: str, worker_id: str
) -> Output:
    """The DLQ record: the original bytes and why they were refused, keyed by the original key."""
    letter = DeadLetterRecord.of(record, source_topic=source_topic, reason=reason, detail=detail, worker_id=worker_id)
    return Output(names.dlq, record.key, letter.encode(), ((REASON_HEADER, reason.value.encode()),))
