"""The topic layout (dpm.layout.v1): which generation of a scope's case-partitioned topics is current.

A case's partition is murmur2(tenant/case) modulo the partition count, so adding partitions to the
events topic in place moves most cases to another partition: their later events land apart from
their earlier ones, and scans, order and erasure break. The count is therefore fixed per
generation, and growing makes a new generation (`dpm topics grow`) instead. The layout record says
which generation is current and what count each of its topics must have, so that a count changed
outside the pipeline (`kafka-topics --alter`) is detected and refused rather than silently accepted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.wire.rejection import decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import validate


@dataclass(frozen=True)
class Retired:
    """A generation made obsolete by a growth: its topics stay, read by replay and erasure only."""

    generation: int
    partitions: int
    events_copied: int


@dataclass(frozen=True)
class Layout:
    """The current generation of one scope's case-partitioned topics, and the generations before it."""

    scope: str
    generation: int
    partitions: int
    retired: tuple[Retired, ...] = ()
    since: str | None = None

    @property
    def key(self) -> bytes:
        return self.scope.encode()

    def grown(self, partitions: int, events_copied: int, now: dt.datetime) -> Layout:
        """The layout after a growth to `partitions`: a new generation, this one retired."""
        if partitions <= self.partitions:
            raise ValueError(f"a growth needs more than the {self.partitions} partitions there are, not {partitions}")
        retired = (*self.retired, Retired(self.generation, self.partitions, events_copied))
        return Layout(self.scope, self.generation + 1, partitions, retired, now.isoformat().replace("+00:00", "Z"))

    def generations(self) -> tuple[int, ...]:
        """Every generation whose topics exist, oldest first."""
        return (*(r.generation for r in self.retired), self.generation)

    def to_wire(self) -> dict[str, Any]:
        retired = [{"generation": r.generation, "partitions": r.partitions, "events_copied": r.events_copied}
                   for r in self.retired]  # fmt: skip
        since = {"since": self.since} if self.since else {}
        return {"schema": SchemaId.LAYOUT.value, "scope": self.scope, "generation": self.generation,
                "partitions": self.partitions, **since, "retired": retired}  # fmt: skip

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> Layout:
        validate(SchemaId.LAYOUT, value)
        retired = tuple(Retired(int(r["generation"]), int(r["partitions"]), int(r["events_copied"]))
                        for r in value["retired"])  # fmt: skip
        return cls(value["scope"], int(value["generation"]), int(value["partitions"]), retired, value.get("since"))

    @classmethod
    def decode(cls, data: bytes | None) -> Layout:
        return cls.from_wire(decode_object(data, "layout record"))


def partition_problems(layout: Layout, counts: Mapping[str, int | None]) -> list[str]:
    """One line per case-partitioned topic (name -> its partition count, None if missing) that breaks the layout."""
    problems = []
    for topic, count in counts.items():
        if count is None:
            problems.append(f"{topic} is missing (generation {layout.generation} of {layout.scope}layout)")
        elif count != layout.partitions:
            problems.append(
                f"{topic} has {count} partitions, but its layout records {layout.partitions}: partitions were "
                "changed outside `dpm topics grow` (kafka-topics --alter?), which moves cases to other partitions"
            )
    return problems
