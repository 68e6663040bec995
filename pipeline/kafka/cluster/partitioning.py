"""The partition of a case: every event and trigger of a case lands in one partition."""

from __future__ import annotations

from confluent_kafka import murmur2

from pipeline.core.events import CaseRef


def case_partition(case: CaseRef, partitions: int) -> int:
    """Java-compatible murmur2 of `tenant/case`.

    Events are keyed `tenant/case/seq`, so the default partitioner would scatter a case; choosing
    the partition from `tenant/case` keeps each case ordered in one partition, and any Kafka
    client in any language computes the same number.
    """
    return int(murmur2(case.key.encode("utf-8"), partitions))


def key_partition(key: bytes | None, partition: int, partitions: int) -> int:
    """The partition of a record keyed `tenant/case` or `tenant/case/...` among `partitions`.

    A key that names no case (a hostile record) keeps its partition number: consumers refuse it
    wherever it is, and copying it elsewhere would not make it readable.
    """
    parts = (key or b"").split(b"/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return partition % partitions
    return int(murmur2(b"/".join(parts[:2]), partitions))
