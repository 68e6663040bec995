"""The dead-letter record (dpm.dlq.v2): why input was refused, and its original bytes.

A dead letter of an events-topic record that names a case keeps its content (the original key and
value, and the detail, which may quote them) sealed under that case's data key, or under the data
keys of both cases when its key and value name different ones: destroying either key (`dpm erase`)
erases the dead letter too, as it does every other copy of the case's content. One of a case
already erased keeps none of it. Other dead letters (triggers, key records, bytes that name no case)
keep their content in clear: they carry routing and tasks, not case content.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.wire.limits import (
    MAX_DEAD_LETTER_DETAIL_CHARS,
    MAX_DEAD_LETTER_KEY_BYTES,
    MAX_DEAD_LETTER_RECORD_KEY_BYTES,
    MAX_DEAD_LETTER_VALUE_BYTES,
)
from pipeline.wire.record_keys import claimed_case
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import SEALED, CaseCipher, CaseErasedError
from pipeline.wire.validation import SchemaError, validate

_SEALED_HEAD = ("detail", "original_key_b64")  # a sealed dead letter's JSON line; the value's raw bytes follow it
# Why a dead letter keeps none of its content: its case is erased, or no key of its tenant can seal it now.
WITHHELD = {Rejection.ERASED: "erased", Rejection.KEY_REVOKED: "key-revoked"}


@dataclass(frozen=True)
class Original:
    """What a dead letter keeps of the refused bytes: all of them, or their start with their size and digest."""

    kept: bytes
    size: int
    sha256: str

    @classmethod
    def of(cls, data: bytes, limit: int) -> Original:
        return cls(data[:limit], len(data), hashlib.sha256(data).hexdigest())

    @property
    def truncated(self) -> bool:
        return len(self.kept) < self.size


_NOTHING = Original(b"", 0, hashlib.sha256(b"").hexdigest())


@dataclass(frozen=True)
class DeadLetterRecord:
    reason: Rejection
    detail: str
    source_topic: str
    source: LogPosition
    original_key: Original | None
    original_value: Original
    worker_id: str

    @classmethod
    def of(cls, record: RawRecord, *, source_topic: str, reason: Rejection, detail: str, worker_id: str
           ) -> DeadLetterRecord:  # fmt: skip
        """The dead letter of a refused record, bounded whatever the record: detail, key and value are cut to size."""
        key = None if record.key is None else Original.of(record.key, MAX_DEAD_LETTER_KEY_BYTES)
        return cls(reason, detail[:MAX_DEAD_LETTER_DETAIL_CHARS], source_topic, record.position, key,
                   Original.of(record.value or b"", MAX_DEAD_LETTER_VALUE_BYTES), worker_id)  # fmt: skip

    @property
    def record_key(self) -> bytes | None:
        """The dead letter's Kafka key: the original key, or `sha256:<digest>` of one too long to repeat."""
        key = self.original_key
        if key is None or key.size <= MAX_DEAD_LETTER_RECORD_KEY_BYTES:
            return None if key is None else key.kept
        return f"sha256:{key.sha256}".encode()

    def _clear(self) -> dict[str, Any]:
        """What a dead letter keeps in clear whatever happens to its case: why, where from, sizes and digests."""
        key, value = self.original_key, self.original_value
        clear: dict[str, Any] = {
            "schema": SchemaId.DEAD_LETTER.value,
            "reason": self.reason.value,
            "source_topic": self.source_topic,
            "source_partition": self.source.partition,
            "source_offset": self.source.offset,
            "original_value_size": value.size,
            "original_value_sha256": value.sha256,
            "worker_id": self.worker_id,
        }
        if key is not None and key.truncated:
            clear |= {"original_key_size": key.size, "original_key_sha256": key.sha256}
        return clear

    def _head(self) -> dict[str, Any]:
        key = self.original_key
        return {"detail": self.detail, "original_key_b64": None if key is None else base64.b64encode(key.kept).decode()}

    def to_wire(self) -> dict[str, Any]:
        """The dead letter with its content in clear."""
        return {
            **self._clear(),
            **self._head(),
            "original_value_b64": base64.b64encode(self.original_value.kept).decode(),
        }

    def _sealed_wire(self, cases: tuple[CaseRef, ...], cipher: CaseCipher) -> dict[str, Any]:
        """The dead letter with its content sealed under each case's data key in turn (innermost first).

        The innermost plaintext is the detail and key as a JSON line, then the value's raw bytes (no
        base64 inside base64); each further layer costs a third more, so with two the value is cut
        to three quarters of what a dead letter keeps: a sealed dead letter stays under 400 KB.
        """
        clear = {**self._clear(), "sealed_under": [{"tenant": c.tenant, "case_id": c.case_id} for c in cases]}
        kept = self.original_value.kept[: MAX_DEAD_LETTER_VALUE_BYTES * 3 // 4 if len(cases) > 1 else None]
        layer = orjson.dumps(self._head()) + b"\n" + kept
        sealed: dict[str, str] = {}
        for index, case in enumerate(cases):
            sealed = cipher.seal(case, layer, _layer_aad(clear, index))
            layer = orjson.dumps(sealed)
        return {**clear, SEALED: sealed}

    def encode(self, cases: tuple[CaseRef, ...] = (), cipher: CaseCipher | None = None) -> bytes:
        """The dead letter's bytes: its content sealed under `cases`' data keys, left out when one is erased.

        Without cases or a cipher (sealing off, or a record that carries no case content) in clear. No
        data key is made for an erased case, nor asked of a key service that revoked the tenant's key:
        its content is simply not kept (`withheld`).
        """
        if cipher is None or not cases:
            return orjson.dumps(self.to_wire())
        cipher.sync()
        if self.reason is Rejection.ERASED or any(cipher.erased(case) for case in cases):
            return self.withheld(Rejection.ERASED)
        if self.reason is Rejection.KEY_REVOKED:
            return self.withheld(Rejection.KEY_REVOKED)
        return orjson.dumps(self._sealed_wire(cases, cipher))

    def withheld(self, because: Literal[Rejection.ERASED, Rejection.KEY_REVOKED]) -> bytes:
        """The dead letter's bytes without its content: a case's key is erased or revoked."""
        return orjson.dumps({**self._clear(), "withheld": WITHHELD[because]})

    @classmethod
    def from_wire(cls, value: Mapping[str, Any], cipher: CaseCipher | None = None) -> DeadLetterRecord:
        """The dead letter of a decoded value (v1 or v2), its sealed content opened with `cipher`.

        Raises CaseErasedError when its content is sealed and a case's key is destroyed (or no
        cipher is given), RejectedError(SCHEMA) when the value is no dead letter.
        """
        schema = value.get("schema")
        if schema not in (SchemaId.DEAD_LETTER, SchemaId.DEAD_LETTER_V1):
            raise RejectedError(Rejection.SCHEMA, f"not a dead letter: schema {str(schema)[:40]!r}")
        try:
            validate(SchemaId(schema), value)
        except SchemaError as exc:
            raise RejectedError(Rejection.SCHEMA, f"not a dead letter: {exc}") from exc
        content: Mapping[str, Any] = value
        if SEALED in value:
            content = _opened(value, cipher)
        elif value.get("withheld") in WITHHELD.values():
            content = {"detail": "", "original_key_b64": None, "original_value_b64": ""}
        return cls(
            reason=Rejection(value["reason"]),
            detail=content["detail"],
            source_topic=value["source_topic"],
            source=LogPosition(int(value["source_partition"]), int(value["source_offset"])),
            original_key=_original({**value, **content}, "key"),
            original_value=_original({**value, **content}, "value") or _NOTHING,
            worker_id=value["worker_id"],
        )

    @classmethod
    def decode(cls, data: bytes | None, cipher: CaseCipher | None = None) -> DeadLetterRecord:
        return cls.from_wire(decode_object(data, "dead letter"), cipher)


def _layer_aad(clear: Mapping[str, Any], index: int) -> bytes:
    """Associated data of one layer: the clear fields, so neither they nor the layers' order can be changed."""
    return orjson.dumps({**clear, "layer": index}, option=orjson.OPT_SORT_KEYS)


def _opened(value: Mapping[str, Any], cipher: CaseCipher | None) -> dict[str, Any]:
    clear = {k: v for k, v in value.items() if k != SEALED}
    cases = tuple(CaseRef(c["tenant"], c["case_id"]) for c in value["sealed_under"])
    if cipher is None:
        raise CaseErasedError.of(cases[0], "its content is sealed and this reader has no keys (set DPM_KEYS_DIR)")
    layer: Mapping[str, Any] = value[SEALED]
    plain = b""
    for index in reversed(range(len(cases))):
        plain = cipher.open(cases[index], layer, _layer_aad(clear, index))
        if index:
            layer = orjson.loads(plain)
    head, newline, kept = plain.partition(b"\n")
    content = orjson.loads(head) if newline else None
    if not isinstance(content, dict) or set(content) != set(_SEALED_HEAD):
        raise RejectedError(Rejection.SCHEMA, "a dead letter's sealed content is not its detail, key and value")
    return {**content, "original_value_b64": base64.b64encode(kept).decode()}


def cases_named(record: RawRecord, tenant: str | None = None) -> tuple[CaseRef, ...]:
    """The cases a record names by its key (`tenant/case[/seq]`) or by its value's clear fields, key's first.

    With `tenant` (the record came from that tenant's own topic) only that tenant's cases count: a
    record of one tenant never has content sealed, nor a data key made, in another's name.
    """
    parts = (record.key or b"").decode("utf-8", "replace").split("/")
    candidates = [claimed_case({"tenant": parts[0], "case_id": parts[1]})] if len(parts) >= 2 else []
    with contextlib.suppress(RejectedError):
        candidates.append(claimed_case(decode_object(record.value, "record")))
    named: list[CaseRef] = []
    for case in candidates:
        if case is not None and case not in named and (tenant is None or case.tenant == tenant):
            named.append(case)
    return tuple(named)


def _original(value: Mapping[str, Any], part: str) -> Original | None:
    encoded = value.get(f"original_{part}_b64")
    if encoded is None:
        return None
    kept = base64.b64decode(encoded)
    size = value.get(f"original_{part}_size", len(kept))
    return Original(kept, int(size), value.get(f"original_{part}_sha256") or hashlib.sha256(kept).hexdigest())


@dataclass(frozen=True)
class RefusedTrigger:
    """A trigger's dead letter (in clear: triggers hold no case content) and the tenant and id of the trigger."""

    letter: DeadLetterRecord
    tenant: str
    trigger_id: str


def refused_trigger(value: bytes | None, is_triggers: Callable[[str], bool]) -> RefusedTrigger | None:
    """The trigger a dead letter refused, when it is a trigger's whose tenant and id can be read.

    None for another record's dead letter (an event's, an output's), for a `duplicate` (the id was
    decided before: that decision is the answer, not a refusal) and for a value that is no dead letter.
    """
    try:
        decoded = decode_object(value, "dead letter")
        if not is_triggers(str(decoded.get("source_topic"))):
            return None
        letter = DeadLetterRecord.from_wire(decoded)
        trigger = decode_object(letter.original_value.kept, "trigger")
    except (RejectedError, CaseErasedError):
        return None
    tenant, trigger_id = trigger.get("tenant"), trigger.get("trigger_id")
    if letter.reason is Rejection.DUPLICATE or not isinstance(tenant, str) or not isinstance(trigger_id, str):
        return None
    return RefusedTrigger(letter, tenant, trigger_id)
