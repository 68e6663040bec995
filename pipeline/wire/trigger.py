"""The trigger record (dpm.trigger.v1): a decision request, and the decision id it gives each architecture."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.domains import DOMAINS
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import Architecture, TaskSpec
from pipeline.wire.limits import MAX_TRIGGER_BYTES
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate


@dataclass(frozen=True)
class TriggerLimits:
    """What a worker accepts beyond the schema: how many positions, which domains (None: any well-formed one)."""

    max_positions: int = 10_000
    domains: frozenset[str] | None = frozenset(DOMAINS)

    @classmethod
    def of(cls, max_positions: int, extra_domains: tuple[str, ...]) -> TriggerLimits:
        """Limits from the settings' values: `extra_domains` adds to the rule-table domains; `*` accepts any."""
        domains = None if "*" in extra_domains else frozenset(DOMAINS) | frozenset(extra_domains)
        return cls(max_positions, domains)

    def check(self, request: DecisionRequest) -> None:
        """Raises RejectedError(SCHEMA) for a request the schema admits but these limits do not."""
        positions = request.positions or ()
        if len(positions) > self.max_positions:
            raise RejectedError(
                Rejection.SCHEMA, f"{len(positions)} positions exceed the limit of {self.max_positions}"
            )
        if request.positions is not None and request.events_count not in (None, len(positions)):
            raise RejectedError(Rejection.SCHEMA, f"events_count {request.events_count} but {len(positions)} positions")
        if self.domains is not None and request.task.domain not in self.domains:
            known = ", ".join(sorted(self.domains))
            raise RejectedError(Rejection.SCHEMA, f"unknown domain {request.task.domain!r} (accepted: {known})")


class InvalidDecisionIdError(DpmError):
    """A text is not a decision id (`<trigger id>:<architecture>`)."""


@dataclass(frozen=True, order=True)
class DecisionId:
    """Deterministic per trigger and architecture, so a duplicate output would be visible as such."""

    trigger_id: str
    architecture: Architecture

    def __str__(self) -> str:
        return f"{self.trigger_id}:{self.architecture.value}"

    @classmethod
    def parse(cls, text: str) -> DecisionId:
        """The id `str()` wrote; the architecture is after the last colon (trigger ids may hold colons)."""
        trigger_id, sep, architecture = text.rpartition(":")
        if not sep or not trigger_id:
            raise InvalidDecisionIdError(f"decision id {text!r} is not <trigger id>:<architecture>")
        try:
            return cls(trigger_id, Architecture(architecture))
        except ValueError as exc:
            raise InvalidDecisionIdError(f"decision id {text!r} names no architecture (dpm, summ)") from exc


@dataclass(frozen=True, order=True)
class DecisionKey:
    """A decision as readers address it: its tenant and its id.

    Trigger ids are chosen per tenant, so two tenants may use the same one: every reader that keeps
    decisions, views or audit records by id keeps them by this key, never by the id alone.
    """

    tenant: str
    decision_id: DecisionId

    def __str__(self) -> str:
        return f"{self.tenant}/{self.decision_id}"


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

    def decision_id(self, architecture: Architecture) -> DecisionId:
        return DecisionId(self.trigger_id, architecture)

    def decision_key(self, architecture: Architecture) -> DecisionKey:
        return DecisionKey(self.case.tenant, self.decision_id(architecture))

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "schema": SchemaId.TRIGGER.value,
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

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> DecisionRequest:
        """The request of a decoded value; raises RejectedError(SCHEMA) unless it is a valid dpm.trigger.v1."""
        try:
            validate(SchemaId.TRIGGER, value)
            positions = value.get("positions")
            return cls(
                trigger_id=value["trigger_id"],
                case=CaseRef(value["tenant"], value["case_id"]),
                task=TaskSpec.from_wire(value["task"]),
                budget_chars=int(value["budget_chars"]),
                architectures=tuple(Architecture(a) for a in value["architectures"]),
                positions=None if positions is None else tuple(LogPosition(p, o) for p, o in positions),
                events_count=value.get("events_count"),
                label=value.get("label"),
            )
        except (SchemaError, DpmError, ValueError) as exc:
            raise RejectedError(Rejection.SCHEMA, str(exc)) from exc

    @classmethod
    def decode(
        cls, data: bytes | None, max_bytes: int = MAX_TRIGGER_BYTES, limits: TriggerLimits | None = None
    ) -> DecisionRequest:
        """The request of raw bytes; raises RejectedError (OVERSIZE, NOT_JSON or SCHEMA)."""
        if data is not None and len(data) > max_bytes:
            raise RejectedError(Rejection.OVERSIZE, f"trigger of {len(data)} bytes exceeds {max_bytes}")
        request = cls.from_wire(decode_object(data, "trigger"))
        (limits or TriggerLimits()).check(request)
        return request
