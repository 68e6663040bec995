"""What both workers write: a run's records as Kafka outputs, dead letters, and the metrics of a decision."""

from __future__ import annotations

import time
from typing import Any

import orjson

from pipeline.core.event_log import RawRecord
from pipeline.core.run import RunResult
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.processing.steps import Output
from pipeline.keys.providers import KeyRevokedError
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.dead_letter import DeadLetterRecord, cases_named
from pipeline.wire.headers import REASON_HEADER, Headers, standard_headers
from pipeline.wire.rejection import Rejection
from pipeline.wire.run_records import RunRecords
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher, seal_body


def run_outputs(
    published: RunRecords, names: TopicNames, cipher: CaseCipher | None, trace_context: Headers = ()
) -> list[Output]:
    """The view, the decision and the audit records as output messages, keyed by decision id.

    With a cipher, their case content is sealed under the case's data key (digests stay in clear).
    Each carries the standard headers (CloudEvents attributes, schema id, tenant) and the trace
    context headers given (W3C traceparent, tracestate).
    """
    decision_id = str(published.decision_id)
    key = decision_id.encode()
    source = worker_source(published.decision_id.architecture, published.decision.worker_id)
    tenant = published.decision.case.tenant

    def output(topic: str, schema: SchemaId, body: dict[str, Any], what: str) -> Output:
        headers = standard_headers(schema, source=source, event_id=f"{decision_id}/{what}", tenant=tenant)
        return Output(topic, key, orjson.dumps(seal_body(body, cipher)), (*headers, *trace_context))

    return [
        output(names.views, SchemaId.VIEW, published.view.to_wire(), "view"),
        output(names.decisions, SchemaId.DECISION, published.decision.to_wire(), "decision"),
        *(output(names.audit, SchemaId.AUDIT, a.to_wire(), f"audit/{a.call_index}") for a in published.audits),
    ]


def worker_source(architecture: Architecture, worker_id: str) -> str:
    """The CloudEvents source of what a worker writes: `/dpm/projection/<id>` or `/dpm/summ-only/<id>`."""
    return f"/dpm/{'projection' if architecture is Architecture.DPM else 'summ-only'}/{worker_id}"


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
    names: TopicNames,
    record: RawRecord,
    *,
    source_topic: str,
    reason: Rejection,
    detail: str,
    worker_id: str,
    cipher: CaseCipher | None = None,
) -> Output:
    """The DLQ record: the original bytes and why they were refused, keyed by the original key.

    With a cipher (sealing on) a refused event of a case keeps its content sealed under the case's
    data key, so that erasing the case erases its dead letters too (wire/dead_letter.py); its content
    is withheld when the tenant's key is revoked. KeyServiceUnavailableError when the key service
    cannot be asked: the caller waits for it, as for Kafka.
    """
    letter = DeadLetterRecord.of(record, source_topic=source_topic, reason=reason, detail=detail, worker_id=worker_id)
    where = f"{source_topic}/{record.position.partition}/{record.position.offset}"
    headers = standard_headers(SchemaId.DEAD_LETTER, source=f"/dpm/workers/{worker_id}", event_id=where, tenant=None)
    # Only events carry case content: their dead letters are sealed under the cases they name.
    cases = cases_named(record, names.tenant) if cipher is not None and names.is_events(source_topic) else ()
    try:
        value = letter.encode(cases, cipher)
    except KeyRevokedError:  # a key that no longer opens keeps no content either; the service away is raised
        value = letter.withheld(Rejection.KEY_REVOKED)
    return Output(names.dlq, letter.record_key, value, (*headers, (REASON_HEADER, reason.value.encode())))
