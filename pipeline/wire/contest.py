"""The contest record (dpm.contest.v2; v1 read too): a what-if, a decisive analysis or an adverse decision's reasons.

One record per contest, on the scope's contests topic, keyed `tenant/case/contest id` and sealed under the
case's data key like the outputs (erasing the case erases it). It keeps every re-decision it made (`runs`:
the events left out or replaced, the label and the view's digest) and the model calls it asked anew, so
that with the contested decision's own audit records it replays by hash (services/contest.py).

A call asked anew is kept as its request's digest and its response whole (core/contest.py's Answer): the
request is the case's prompt, which replay builds again from the log and the recorded changes, so a record
no longer grows with the case (v1 kept each request whole, and a few dozen re-decisions of an ordinary case
passed the 1,000,000-byte record limit). What grows with the number of calls is split the way a long
case's views are: the answers go to part records of their own (dpm.contest_part.v1, keyed
`tenant/case/contest id/part/<n>`, sealed the same way), which the head lists by digest and count, and a
reader joins them back and checks each digest before replaying.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import orjson

from pipeline.core.contest import AdverseReasons, Answer, Decisive, EventChange, WhatIf
from pipeline.core.events import CaseRef
from pipeline.core.hashing import json_digest, text_digest
from pipeline.core.model import ModelResponse, Purpose
from pipeline.core.run import ModelCall
from pipeline.core.view import Fact
from pipeline.wire.audit import call_from_wire, response_from_wire
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher, open_body, seal_body
from pipeline.wire.trigger import DecisionId
from pipeline.wire.validation import SchemaError, validate

# Sealing writes the content as base64 (4 bytes for 3): a part's plain answers are kept to this share of a
# record, the rest left for the clear fields and the envelope.
_SEALED_SHARE = (3, 4)
_ENVELOPE_BYTES = 2_048


class ContestKind(StrEnum):
    WHATIF = "whatif"
    DECISIVE = "decisive"
    REASONS = "reasons"


@dataclass(frozen=True)
class Run:
    """One re-decision a contest made: which events it left out or replaced, and what came of it."""

    left_out: tuple[int, ...]
    replaced: tuple[int, ...]
    label: str | None
    view_sha256: str

    @classmethod
    def of(cls, outcome: WhatIf) -> Run:
        left = tuple(sorted(c.index for c in outcome.changes if c.left_out))
        replaced = tuple(sorted(c.index for c in outcome.changes if not c.left_out))
        return cls(left, replaced, outcome.label, text_digest(outcome.result.view_text))

    def wire(self) -> dict[str, Any]:
        return {"left_out": list(self.left_out), "replaced": list(self.replaced), "label": self.label,
                "view_sha256": self.view_sha256}  # fmt: skip


@dataclass(frozen=True)
class Asker:
    """Who asked for a contest, when, and why (the reason is case content: it is sealed)."""

    who: str
    at_ms: int
    why: str = ""


class ContestTooLargeError(RejectedError):
    """Even split, the contest has a record over the limit (a single answer, or its runs alone, too large)."""


@dataclass(frozen=True)
class PartRef:
    """One part record of a split contest, as its head lists it: the part's number, its answers' count and digest."""

    part: int
    calls: int
    sha256: str

    def wire(self) -> dict[str, Any]:
        return {"part": self.part, "calls": self.calls, "sha256": self.sha256}


@dataclass(frozen=True)
class ContestPart:
    """Some of a split contest's answers, in a record of their own beside its head."""

    case: CaseRef
    contest_id: str
    part: int
    answers: tuple[Answer, ...]

    @property
    def record_key(self) -> bytes:
        """`tenant/case/contest id/part/<n>`: under the case's prefix, so the case's erasure covers it too."""
        return f"{self.case.key}/{self.contest_id}/part/{self.part}".encode()

    @property
    def ref(self) -> PartRef:
        return PartRef(self.part, len(self.answers), answers_digest(self.answers))

    def to_wire(self) -> dict[str, Any]:
        return {"schema": SchemaId.CONTEST_PART.value, "contest_id": self.contest_id, "tenant": self.case.tenant,
                "case_id": self.case.case_id, "part": self.part,
                "calls": [answer_to_wire(a) for a in self.answers]}  # fmt: skip

    def encode(self, cipher: CaseCipher | None) -> bytes:
        return orjson.dumps(seal_body(self.to_wire(), cipher))

    @classmethod
    def decode(cls, data: bytes | None, cipher: CaseCipher | None) -> ContestPart:
        """The part, opened and checked; raises RejectedError (CaseErasedError once the case is erased)."""
        body = _opened(data, cipher, (SchemaId.CONTEST_PART,), "contest part")
        return cls(CaseRef(body["tenant"], body["case_id"]), body["contest_id"], int(body["part"]),
                   tuple(answer_from_wire(c) for c in body["calls"]))  # fmt: skip


@dataclass(frozen=True)
class Encoded:
    """One record of a contest as the contests topic takes it: the head, or one of its parts."""

    key: bytes
    value: bytes
    schema: SchemaId
    event_id: str


@dataclass(frozen=True)
class ContestRecord:
    """A contest of one published decision, as published and read back.

    `answers` holds every call asked anew; a head read back from a split contest holds none until `joined`
    with its parts, which `parts` lists.
    """

    contest_id: str
    kind: ContestKind
    case: CaseRef
    decision_id: DecisionId
    asker: Asker
    backend: str
    model: str
    changes: tuple[EventChange, ...]
    runs: tuple[Run, ...]
    answers: tuple[Answer, ...]
    outcome: Mapping[str, Any]
    usage: Mapping[str, int | None]
    parts: tuple[PartRef, ...] = ()

    @property
    def record_key(self) -> bytes:
        """`tenant/case/contest id`: erasure finds a case's contests by its prefix, as it finds its other records."""
        return f"{self.case.key}/{self.contest_id}".encode()

    @property
    def runs_sha256(self) -> str:
        return json_digest([r.wire() for r in self.runs])

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.CONTEST.value, "contest_id": self.contest_id, "kind": self.kind.value,
            "tenant": self.case.tenant, "case_id": self.case.case_id, "decision_id": str(self.decision_id),
            "architecture": self.decision_id.architecture.value, "asked_by": self.asker.who,
            "asked_at_ms": self.asker.at_ms, "backend": self.backend, "model": self.model, "why": self.asker.why,
            "changes": [_change_wire(c) for c in self.changes], "runs": [r.wire() for r in self.runs],
            "calls": [] if self.parts else [answer_to_wire(a) for a in self.answers], "outcome": dict(self.outcome),
            "usage": dict(self.usage), "runs_sha256": self.runs_sha256, "parts": [p.wire() for p in self.parts],
        }  # fmt: skip

    def encode(self, cipher: CaseCipher | None) -> bytes:
        return orjson.dumps(seal_body(self.to_wire(), cipher))

    def encoded(self, cipher: CaseCipher | None, max_bytes: int) -> list[Encoded]:
        """The contest as records of at most `max_bytes` each (key and value), the head last.

        The head alone where it fits; else its answers in parts, then the head listing them, so that a
        reader that finds the head finds its parts before it.

        Raises ContestTooLargeError when a record is over the limit even so.
        """
        head = self._encoded_head(cipher)
        if len(head.key) + len(head.value) <= max_bytes:
            return [head]
        parts = [ContestPart(self.case, self.contest_id, n, group)
                 for n, group in enumerate(_packed(self.answers, max_bytes), start=1)]  # fmt: skip
        split = replace(self, parts=tuple(p.ref for p in parts))
        records = [Encoded(p.record_key, p.encode(cipher), SchemaId.CONTEST_PART, f"{self.contest_id}/part/{p.part}")
                   for p in parts]  # fmt: skip
        records.append(split._encoded_head(cipher))
        if any(len(r.key) + len(r.value) > max_bytes for r in records):
            raise ContestTooLargeError(Rejection.SCHEMA, f"the contest has a record over {max_bytes:,} bytes even "
                                                         f"split in {len(parts)} part(s)")  # fmt: skip
        return records

    def _encoded_head(self, cipher: CaseCipher | None) -> Encoded:
        return Encoded(self.record_key, self.encode(cipher), SchemaId.CONTEST, self.contest_id)

    def joined(self, found: Mapping[int, ContestPart]) -> ContestRecord:
        """The head with the answers of the parts it lists; RejectedError for a part missing or not as listed."""
        answers: list[Answer] = []
        for ref in self.parts:
            part = found.get(ref.part)
            if part is None:
                raise RejectedError(Rejection.SCHEMA, f"part {ref.part} of {len(self.parts)} of the contest is missing")
            if part.ref != ref or (part.case, part.contest_id) != (self.case, self.contest_id):
                raise RejectedError(Rejection.SCHEMA, f"part {ref.part} of the contest does not match its digest")
            answers.extend(part.answers)
        return replace(self, answers=(*self.answers, *answers))

    @classmethod
    def decode(cls, data: bytes | None, cipher: CaseCipher | None) -> ContestRecord:
        """The record (v2, or v1 as v2), opened and checked; raises RejectedError (CaseErasedError once erased)."""
        body = _opened(data, cipher, (SchemaId.CONTEST, SchemaId.CONTEST_V1), "contest record")
        record = cls(
            contest_id=body["contest_id"], kind=ContestKind(body["kind"]),
            case=CaseRef(body["tenant"], body["case_id"]), decision_id=DecisionId.parse(body["decision_id"]),
            asker=Asker(body["asked_by"], int(body["asked_at_ms"]), body["why"]), backend=body["backend"],
            model=body["model"], changes=tuple(_change_from_wire(c) for c in body["changes"]),
            runs=tuple(Run(tuple(r["left_out"]), tuple(r["replaced"]), r["label"], r["view_sha256"])
                       for r in body["runs"]),
            answers=tuple(_answer_of(c) for c in body["calls"]), outcome=body["outcome"], usage=body["usage"],
            parts=tuple(PartRef(int(p["part"]), int(p["calls"]), p["sha256"]) for p in body.get("parts", ())),
        )  # fmt: skip
        if record.runs_sha256 != body["runs_sha256"]:
            raise RejectedError(Rejection.SCHEMA, "the contest's runs do not match their digest")
        return record


def _opened(data: bytes | None, cipher: CaseCipher | None, schemas: Sequence[SchemaId], what: str) -> dict[str, Any]:
    """A sealed record's body, opened and valid against the one of `schemas` it names."""
    body = open_body(decode_object(data, what), cipher)
    named = body.get("schema")
    schema = next((s for s in schemas if s.value == named), None)
    if schema is None:
        raise RejectedError(Rejection.SCHEMA, f"{what}: not a schema this release reads (it reads "
                                              f"{', '.join(s.value for s in schemas)})")  # fmt: skip
    try:
        validate(schema, body)
    except SchemaError as exc:
        raise RejectedError(Rejection.SCHEMA, str(exc)) from exc
    return body


def answer_to_wire(answer: Answer) -> dict[str, Any]:
    """A call asked anew as a contest keeps it: the request's digest and purpose, the response whole.

    The response as audit records carry it: its raw bytes whole (its text is read from them again, as replay does).
    """
    response = answer.response
    return {"purpose": answer.purpose.value, "request_sha256": answer.request_sha256, "model": response.model,
            "raw_response_b64": base64.b64encode(response.raw).decode("ascii"),
            "raw_response_sha256": response.raw_digest, "response_format": response.format.value,
            "stop_reason": response.stop_reason, "usage": response.usage.wire(), "cost_usd": response.cost_usd,
            "latency_s": response.latency_s, "serving": dict(response.serving)}  # fmt: skip


def answer_from_wire(value: Mapping[str, Any]) -> Answer:
    """Inverse of answer_to_wire; RejectedError when the response is not the one its digest names."""
    response: ModelResponse = response_from_wire(value)
    if response.raw_digest != value["raw_response_sha256"]:
        raise RejectedError(Rejection.SCHEMA, "a contest's answer does not match its digest")
    return Answer(value["request_sha256"], Purpose(value["purpose"]), response)


def _answer_of(value: Mapping[str, Any]) -> Answer:
    """An answer of either version: v1 kept the whole request, v2 its digest."""
    if "request" in value:
        return Answer.of(call_from_wire(value))
    return answer_from_wire(value)


def answers_digest(answers: Sequence[Answer]) -> str:
    """SHA-256 of the answers as canonical JSON: what a head lists of each of its parts."""
    return json_digest([answer_to_wire(a) for a in answers])


def _packed(answers: Sequence[Answer], max_bytes: int) -> list[tuple[Answer, ...]]:
    """The answers in order, in groups each small enough, sealed, for a record of `max_bytes`."""
    room = (max_bytes - _ENVELOPE_BYTES) * _SEALED_SHARE[0] // _SEALED_SHARE[1]
    groups: list[tuple[Answer, ...]] = []
    current: list[Answer] = []
    used = 0
    for answer in answers:
        size = len(orjson.dumps(answer_to_wire(answer))) + 1
        if current and used + size > room:
            groups.append(tuple(current))
            current, used = [], 0
        current.append(answer)
        used += size
    if current:
        groups.append(tuple(current))
    return groups


def new_contest_id() -> str:
    """A fresh contest id: 32 hex digits."""
    return uuid.uuid4().hex


def _change_wire(change: EventChange) -> dict[str, Any]:
    if change.left_out:
        return {"index": change.index, "action": "leave-out"}
    return {"index": change.index, "action": "replace", "kind": change.kind, "text": change.text}


def _change_from_wire(value: Mapping[str, Any]) -> EventChange:
    if value["action"] == "leave-out":
        return EventChange(int(value["index"]))
    return EventChange(int(value["index"]), str(value["kind"]), str(value["text"]))


def facts_wire(facts: Sequence[Fact]) -> list[dict[str, Any]]:
    """Facts as a contest's outcome lists them: text and citations."""
    return [{"text": f.text, "citations": list(f.citations)} for f in facts]


def whatif_outcome(outcome: WhatIf) -> dict[str, Any]:
    """A what-if's outcome field: both labels, the new view, the facts it added and removed."""
    return {"original_label": outcome.original_label, "label": outcome.label, "changed": outcome.changed,
            "view": outcome.result.view_text, "facts_added": facts_wire(outcome.facts_added),
            "facts_removed": facts_wire(outcome.facts_removed)}  # fmt: skip


def decisive_outcome(decisive: Decisive) -> dict[str, Any]:
    """A decisive analysis's outcome field: the label, the decisive groups, whether every candidate was tried."""
    return {"original_label": decisive.label, "decisive": [list(g) for g in decisive.groups],
            "complete": decisive.complete}  # fmt: skip


def reasons_outcome(reasons: AdverseReasons) -> dict[str, Any]:
    """An adverse decision's reasons as its contest records them."""
    rows = [{"rank": r.rank, "fact": r.fact.text, "citations": list(r.fact.citations),
             "changes_decision": r.changes_decision, "in_notice": r.in_notice} for r in reasons.reasons]  # fmt: skip
    return {"original_label": reasons.label, "heading": reasons.heading, "reasons": rows,
            "complete": reasons.complete}  # fmt: skip


def usage_of(runs: Sequence[WhatIf], calls: Sequence[ModelCall | Answer], reused: int,
             max_calls: int | None) -> dict[str, Any]:  # fmt: skip
    """What a contest cost (`calls` asked anew) beside what its re-decisions would have cost from scratch."""
    return {"calls": len(calls),
            "tokens": sum(c.response.usage.input_tokens + c.response.usage.output_tokens for c in calls),
            "reused_calls": reused, "from_scratch_calls": sum(r.from_scratch_calls for r in runs),
            "from_scratch_tokens": sum(r.from_scratch_tokens for r in runs), "max_calls": max_calls}  # fmt: skip
