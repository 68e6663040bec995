"""Output records shared by both workers: views, decisions, audits and dead letters."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.assemble import Rejection
from pipeline.core.events import Trajectory
from pipeline.core.log import RawRecord
from pipeline.core.record import Provenance, audit_records, decision_record, view_record
from pipeline.core.replay import verify_recorded
from pipeline.core.run import RunResult
from pipeline.core.task import Budget, TaskSpec
from pipeline.kafka.eos import Output
from pipeline.kafka.topics import TopicNames
from pipeline.observability.metrics import PipelineMetrics

DLQ_SCHEMA = "dpm.dlq.v1"


@dataclass(frozen=True)
class Published:
    """A run's records as published: the view, the decision record and the audit records."""

    decision_id: str
    view: dict[str, Any]
    decision: dict[str, Any]
    audits: list[dict[str, Any]]

    def outputs(self, names: TopicNames) -> list[Output]:
        """The records as output messages, keyed by decision id."""
        key = self.decision_id.encode()
        return [
            Output(names.views, key, orjson.dumps(self.view)),
            Output(names.decisions, key, orjson.dumps(self.decision)),
            *(Output(names.audit, key, orjson.dumps(a)) for a in self.audits),
        ]


def publish(
    result: RunResult, trajectory: Trajectory, *, task: TaskSpec, budget: Budget, provenance: Provenance
) -> Published:
    """The view, the decision record and one audit record per model call of a run."""
    case = trajectory.case
    return Published(
        decision_id=provenance.decision_id,
        view=view_record(result, case, provenance.decision_id),
        decision=decision_record(result, trajectory, task, budget, provenance),
        audits=audit_records(result, case, provenance),
    )


def observe_published(
    metrics: PipelineMetrics,
    result: RunResult,
    published: Published,
    *,
    tenant: str,
    triggered_ms: int | None,
    calls_counted_already: int = 0,
) -> None:
    """Counts a decision, and checks (without a model call) that its recorded response reproduces its view."""
    end_to_end = time.time() - triggered_ms / 1000 if triggered_ms else None
    metrics.observe_run(result, tenant, end_to_end, calls_counted_already=calls_counted_already)
    metrics.replays.labels(verify_recorded(published.decision, published.audits).status.value).inc()


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
