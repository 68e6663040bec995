"""The dead-letter record (dpm.dlq.v1): refused input's original bytes and why it was refused."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.wire.limits import (
    MAX_DEAD_LETTER_DETAIL_CHARS,
    MAX_DEAD_LETTER_KEY_BYTES,
    MAX_DEAD_LETTER_RECORD_KEY_BYTES,
    MAX_DEAD_LETTER_VALUE_BYTES,
)
from pipeline.wire.rejection import Rejection
from pipeline.wire.schema_ids import SchemaId


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

    def to_wire(self) -> dict[str, Any]:
        key, value = self.original_key, self.original_value
        wire: dict[str, Any] = {
            "schema": SchemaId.DEAD_LETTER.value,
            "reason": self.reason.value,
            "detail": self.detail,
            "source_topic": self.source_topic,
            "source_partition": self.source.partition,
            "source_offset": self.source.offset,
            "original_key_b64": None if key is None else base64.b64encode(key.kept).decode(),
            "original_value_b64": base64.b64encode(value.kept).decode(),
            "original_value_size": value.size,
            "original_value_sha256": value.sha256,
            "worker_id": self.worker_id,
        }
        if key is not None and key.truncated:
            wire |= {"original_key_size": key.size, "original_key_sha256": key.sha256}
        return wire

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> DeadLetterRecord:
        """Inverse of to_wire, for a schema-valid value (one written before sizes were kept counts as whole)."""
        return cls(
            reason=Rejection(value["reason"]),
            detail=value["detail"],
            source_topic=value["source_topic"],
            source=LogPosition(int(value["source_partition"]), int(value["source_offset"])),
            original_key=_original(value, "key"),
            original_value=_original(value, "value") or Original(b"", 0, hashlib.sha256(b"").hexdigest()),
            worker_id=value["worker_id"],
        )


def _original(value: Mapping[str, Any], part: str) -> Original | None:
    encoded = value.get(f"original_{part}_b64")
    if encoded is None:
        return None
    kept = base64.b64decode(encoded)
    size = value.get(f"original_{part}_size", len(kept))
    return Original(kept, int(size), value.get(f"original_{part}_sha256") or hashlib.sha256(kept).hexdigest())
