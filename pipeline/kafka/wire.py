"""Wire forms of events and triggers, keys and the partition of a case."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import murmur2

from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.task import Architecture, TaskSpec

TRIGGER_SCHEMA = "dpm.trigger.v1"
TENANT_HEADER = "dpm-tenant"


def case_partition(case: CaseRef, partitions: int) -> int:
    """The partition of every event and trigger of a case: Java-compatible murmur2 of `tenant/case`.

    Events are keyed `tenant/case/seq`, so the default partitioner would scatter a case; choosing
    the partition from `tenant/case` keeps each case ordered in one partition, and any Kafka
    client in any language computes the same number.
    """
    return int(murmur2(case.key.encode("utf-8"), partitions))


@dataclass(frozen=True)
class CaseOpening:
    """What the first event of a case may declare for the per-event baseline: task and budgets."""

    task: TaskSpec
    summ_budgets: tuple[int, ...] = ()

    def annotate(self, event: Event) -> dict[str, Any]:
        """The event's wire value, with the opening declared on seq 1 only."""
        value = event.wire()
        if event.seq == 1:
            value["task"] = self.task.wire()
            if self.summ_budgets:
                value["summ_budgets"] = list(self.summ_budgets)
        return value

    @classmethod
    def from_event_value(cls, value: dict[str, Any]) -> CaseOpening | None:
        """The opening declared on a schema-valid event value, if any."""
        task = value.get("task")
        if task is None:
            return None
        return cls(TaskSpec.from_wire(task), tuple(int(b) for b in value.get("summ_budgets", ())))


@dataclass(frozen=True)
class DecisionRequest:
    """A trigger: decide this case for this task and budget, with these architectures."""

    trigger_id: str
    case: CaseRef
    task: TaskSpec
    budget_chars: int
    architectures: tuple[Architecture, ...]
    positions: tuple[LogPosition, ...] | None = None
    events_count: int | None = None
    label: str | None = None

    def value(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "schema": TRIGGER_SCHEMA,
            "trigger_id": self.trigger_id,
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "task": self.task.wire(),
            "budget_chars": self.budget_chars,
            "architectures": [a.value for a in self.architectures],
        }
        if self.positions is not None:
            body["positions"] = [[p.partition, p.offset] for p in self.positions]
        if self.events_count is not None:
            body["events_count"] = self.events_count
        if self.label is not None:
            body["label"] = self.label
        return body

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> DecisionRequest:
        """Builds a request from a schema-valid trigger value."""
        task = value["task"]
        positions = value.get("positions")
        return cls(
            trigger_id=value["trigger_id"],
            case=CaseRef(value["tenant"], value["case_id"]),
            task=TaskSpec.from_wire(task),
            budget_chars=int(value["budget_chars"]),
            architectures=tuple(Architecture(a) for a in value["architectures"]),
            positions=None if positions is None else tuple(LogPosition(p, o) for p, o in positions),
            events_count=value.get("events_count"),
            label=value.get("label"),
        )

    def decision_id(self, architecture: Architecture) -> str:
        """Deterministic per trigger and architecture, so a duplicate output would be visible as such."""
        return f"{self.trigger_id}:{architecture.value}"
