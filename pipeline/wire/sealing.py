"""Envelope form of records that hold case content: content fields sealed, routing metadata in clear.

A sealed record keeps every field but its content fields, plus `sealed` (schemas/sealed.v1.json):
the content fields as one JSON object, encrypted under the case's data key with the record's clear
fields (sorted JSON) as associated data, so neither the ciphertext nor the clear fields it travels
with can be swapped or altered unnoticed. Digests in the clear fields are over plaintext, so a
decision replays and verifies exactly as an unsealed one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from pipeline.core.events import CaseRef
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate

# The fields of each record that hold case content (text that came from, or quotes, the case).
CONTENT_FIELDS: Mapping[SchemaId, tuple[str, ...]] = {
    SchemaId.EVENT: ("text",),
    SchemaId.VIEW: ("view", "facts", "reasoning", "compliance_notes"),
    SchemaId.DECISION: ("decision", "view_checks"),
    SchemaId.DECISION_V1: ("decision", "view_checks"),
    SchemaId.AUDIT: ("request", "raw_response_b64", "response_text"),
    SchemaId.SEGMENT: ("view",),
    SchemaId.CONTEST: ("why", "changes", "runs", "calls", "outcome"),
    SchemaId.CONTEST_V1: ("why", "changes", "runs", "calls", "outcome"),
    SchemaId.CONTEST_PART: ("calls",),
}
SEALED = "sealed"


class CaseErasedError(RejectedError):
    """The case's data key is destroyed (or was never published): its sealed content cannot be read."""

    def __init__(self, reason: Rejection, detail: str, case: CaseRef | None = None) -> None:
        super().__init__(reason, detail)
        self.case = case

    @classmethod
    def of(cls, case: CaseRef, why: str = "its data key is destroyed") -> CaseErasedError:
        return cls(Rejection.ERASED, f"{case.key}: {why}", case)

    def __reduce__(self) -> tuple[type[CaseErasedError], tuple[Rejection, str, CaseRef | None]]:  # type: ignore[override]
        return type(self), (self.reason, self.detail, self.case)


class CaseCipher(Protocol):
    """Seals and opens content under a case's data key (pipeline.keys implements it)."""

    def sync(self) -> None:
        """Learns every key created or destroyed so far (an erasure takes effect from the next call)."""
        ...

    def prepare(self, cases: Iterable[CaseRef]) -> None:
        """Creates the data keys the cases lack, all at once (a writer about to seal many new cases)."""
        ...

    def seal(self, case: CaseRef, plaintext: bytes, aad: bytes) -> dict[str, str]:
        """The sealed object for `plaintext` under the case's current data key (created if it has none)."""
        ...

    def open(self, case: CaseRef, sealed: Mapping[str, Any], aad: bytes) -> bytes:
        """The plaintext; raises CaseErasedError when the key is gone, RejectedError(SCHEMA) when tampered."""
        ...

    def erased(self, case: CaseRef) -> bool:
        """Whether the case was erased (its key destroyed by a tombstone), as far as the last sync told."""
        ...

    def opens(self, case: CaseRef) -> bool:
        """Whether the case has a data key that opens (unwrapped if not cached; none is made); a refusal is raised."""
        ...


def case_of(body: Mapping[str, Any]) -> CaseRef:
    """The case a record belongs to, from its clear `tenant` and `case_id`."""
    return CaseRef(str(body["tenant"]), str(body["case_id"]))


def _associated(clear: Mapping[str, Any]) -> bytes:
    return orjson.dumps(clear, option=orjson.OPT_SORT_KEYS)


def seal_body(body: Mapping[str, Any], cipher: CaseCipher | None) -> dict[str, Any]:
    """The record with its content fields sealed (unchanged without a cipher: encryption is off)."""
    if cipher is None:
        return dict(body)
    fields = CONTENT_FIELDS[SchemaId(body["schema"])]
    content = {f: body[f] for f in fields if f in body}
    clear = {k: v for k, v in body.items() if k not in fields}
    return {**clear, SEALED: cipher.seal(case_of(body), orjson.dumps(content), _associated(clear))}


def seal_state(case: CaseRef, value: Any, cipher: CaseCipher | None, slot: str) -> Any:  # noqa: ANN401 - JSON
    """A stored state value (the baseline's tables) sealed whole, bound to its table key `slot`."""
    if cipher is None:
        return value
    return {SEALED: cipher.seal(case, orjson.dumps(value), slot.encode())}


def open_state(case: CaseRef, stored: Any, cipher: CaseCipher | None, slot: str) -> Any:  # noqa: ANN401 - JSON
    """Inverse of seal_state; a value stored in clear is returned as is. Raises CaseErasedError."""
    if not (isinstance(stored, Mapping) and set(stored) == {SEALED}):
        return stored
    if cipher is None:
        raise CaseErasedError.of(case, "its state is sealed and this process has no keys (set DPM_KEYS_DIR)")
    return orjson.loads(cipher.open(case, stored[SEALED], slot.encode()))


def open_body(body: Mapping[str, Any], cipher: CaseCipher | None) -> dict[str, Any]:
    """The record with its content fields back in clear; a record that was never sealed is returned as is.

    Raises CaseErasedError when the case is erased (or no keys are configured to open it).
    """
    sealed = body.get(SEALED)
    if sealed is None:
        return dict(body)
    if not isinstance(sealed, Mapping):
        raise RejectedError(Rejection.SCHEMA, "`sealed` is not an object")
    clear = {k: v for k, v in body.items() if k != SEALED}
    try:
        case = case_of(clear)
    except KeyError as exc:
        raise RejectedError(Rejection.SCHEMA, "a sealed record without tenant and case_id") from exc
    if cipher is None:
        raise CaseErasedError.of(case, "its content is sealed and this reader has no keys (set DPM_KEYS_DIR)")
    try:
        fields = CONTENT_FIELDS[SchemaId(str(clear.get("schema")))]
    except (KeyError, ValueError) as exc:
        raise RejectedError(Rejection.SCHEMA, f"schema {clear.get('schema')!r} has no sealed form") from exc
    content = orjson.loads(cipher.open(case, sealed, _associated(clear)))
    if not isinstance(content, dict) or set(content) - set(fields):
        raise RejectedError(Rejection.SCHEMA, "sealed content holds fields that are not content fields")
    return {**clear, **content}


def opened_record(data: bytes | None, cipher: CaseCipher | None, schema: SchemaId, what: str) -> dict[str, Any]:
    """A sealed record's body, decoded, opened and valid against `schema`; RejectedError (CaseErasedError) else."""
    body = open_body(decode_object(data, what), cipher)
    try:
        validate(schema, body)
    except SchemaError as exc:
        raise RejectedError(Rejection.SCHEMA, str(exc)) from exc
    return body
