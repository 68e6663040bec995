"""The published ledger (dpm.ledger.v1): which input offsets of one partition already have their outputs committed.

A consumer that commits its input offsets apart from its outputs (the faust baseline commits
them itself, at least once) writes this record in the same transaction as the outputs of each
input record. A record delivered again is then found here and not published twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.wire.rejection import decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import validate

# Ranges kept: a redelivery reaches back only as far as the consumer's last commit, a few hundred
# records at most, so the newest 1,024 ranges are far more than enough.
MAX_RANGES = 1024


@dataclass(frozen=True)
class PublishedLedger:
    """Ascending, disjoint, inclusive [first, last] ranges of one input partition's published offsets."""

    topic: str
    partition: int
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def key(self) -> bytes:
        return f"{self.topic}/{self.partition}".encode()

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and any(first <= offset <= last for first, last in self.ranges)

    def with_offset(self, offset: int) -> PublishedLedger:
        """The ledger with `offset` added (adjacent ranges merged; only the newest MAX_RANGES kept)."""
        merged: list[list[int]] = []
        for first, last in sorted((*self.ranges, (offset, offset))):
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        ranges = tuple((first, last) for first, last in merged)[-MAX_RANGES:]
        return PublishedLedger(self.topic, self.partition, ranges)

    def to_wire(self) -> dict[str, Any]:
        return {"schema": SchemaId.LEDGER.value, "topic": self.topic, "partition": self.partition,
                "published": [list(r) for r in self.ranges]}  # fmt: skip

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> PublishedLedger:
        validate(SchemaId.LEDGER, value)
        return cls(value["topic"], int(value["partition"]), tuple((int(f), int(t)) for f, t in value["published"]))

    @classmethod
    def decode(cls, data: bytes | None) -> PublishedLedger:
        return cls.from_wire(decode_object(data, "ledger record"))
