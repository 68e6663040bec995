"""The dead-letter record (dpm.dlq.v1): refused input's original bytes and why it was refused."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.wire.limits import MAX_DEAD_LETTER_DETAIL_CHARS
from pipeline.wire.rejection import Rejection
from pipeline.wire.schema_ids import SchemaId


@dataclass(frozen=True)
class DeadLetterRecord:
    reason: Rejection
    detail: str
    source_topic: str
    source: LogPosition
    original_key: bytes | None
    original_value: bytes
    worker_id: str

    @classmethod
    def of(cls, record: RawRecord, *, source_topic: str, reason: Rejection, detail: str, worker_id: str
           ) -> DeadLetterRecord:  # fmt: skip
        """The dead letter of a refused record; the detail is cut to a bounded length."""
        return cls(reason, detail[:MAX_DEAD_LETTER_DETAIL_CHARS], source_topic, record.position, record.key,
                   record.value or b"", worker_id)  # fmt: skip

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.DEAD_LETTER.value,
            "reason": self.reason.value,
            "detail": self.detail,
            "source_topic": self.source_topic,
            "source_partition": self.source.partition,
            "source_offset": self.source.offset,
            "original_key_b64": None if self.original_key is None else base64.b64encode(self.original_key).decode(),
            "original_value_b64": base64.b64encode(self.original_value).decode(),
            "worker_id": self.worker_id,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> DeadLetterRecord:
        """Inverse of to_wire, for a schema-valid value."""
        key = value.get("original_key_b64")
        return cls(
            reason=Rejection(value["reason"]),
            detail=value["detail"],
            source_topic=value["source_topic"],
            source=LogPosition(int(value["source_partition"]), int(value["source_offset"])),
            original_key=None if key is None else base64.b64decode(key),
            original_value=base64.b64decode(value["original_value_b64"]),
            worker_id=value["worker_id"],
        )
