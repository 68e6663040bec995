"""Output records shared by both workers: views, decisions, audits and dead letters."""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson

from pipeline.core.assemble import Rejection
from pipeline.core.events import CaseRef, Trajectory
from pipeline.core.log import RawRecord
from pipeline.core.record import Provenance, audit_records, decision_record, view_record
from pipeline.core.replay import verify_recorded
from pipeline.core.run import RunResult
from pipeline.core.task import Budget, TaskSpec
from pipeline.kafka.eos import Output
from pipeline.kafka.topics import TopicNames
from pipeline.observability.metrics import PipelineMetrics

DLQ_SCHEMA = "dpm.dlq.v1"


def observe_published(
    metrics: PipelineMetrics,
    result: RunResult,
    tenant: str,
    outputs: list[Output],
    *,
    triggered_ms: int | None,
    calls_counted_already: int = 0,
) -> None:
    """Counts a decision, and checks (without a model call) that its recorded response reproduces its view."""
    end_to_end = time.time() - triggered_ms / 1000 if triggered_ms else None
    metrics.observe_run(result, tenant, end_to_end, calls_counted_already=calls_counted_already)
    decision = next(orjson.loads(o.value) for o in outputs if o.topic.endswith(".decisions"))
    audits = [orjson.loads(o.value) for o in outputs if o.topic.endswith(".audit")]
    metrics.replays.labels(verify_recorded(decision, audits).status.value).inc()


def run_outputs(
    names: TopicNames,
    result: RunResult,
    trajectory: Trajectory,
    *,
    task: TaskSpec,
    budget: Budget,
    provenance: Provenance,
) -> list[Output]:
    """The view, the decision record and one audit record per model call, keyed by decision id."""
    key = provenance.decision_id.encode()
    case: CaseRef = trajectory.case
    decision = decision_record(result, trajectory, task, budget, provenance)
    outputs = [
        Output(names.views, key, orjson.dumps(view_record(result, case, provenance.decision_id))),
        Output(names.decisions, key, orjson.dumps(decision)),
    ]
    outputs += [Output(names.audit, key, orjson.dumps(a)) for a in audit_records(result, case, provenance)]
    return outputs


def dead_letter(
    names: TopicNames, record: RawRecord, *, source_topic: str, reason: Rejection, detail: str, worker_id: str
) -> Output:
    """The DLQ record: the original bytes and why they were refused, keyed by the original key."""
    body: dict[str, Any] = {
        "schema": DLQ_SCHEMA,
        "reason": reason.value,
        "detail": detail[:2000],
        "source_topic": source_topic,
        "source_partition": record.position.partition,
        "source_offset": record.position.offset,
        "original_key_b64": base64.b64encode(record.key).decode() if record.key is not None else None,
        "original_value_b64": base64.b64encode(record.value or b"").decode(),
        "worker_id": worker_id,
    }
    return Output(names.dlq, record.key, orjson.dumps(body), (("dpm-reason", reason.value.encode()),))
