"""KafkaEventLog: reads a case's events by explicit offset (assign and seek, no consumer group)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.event_log import PositionOutOfRangeError, RawRecord, ReadDeadlineError, ReadResult
from pipeline.core.events import CaseRef, LogPosition
from pipeline.kafka.admin import topic_partitions
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.partitioning import case_partition
from pipeline.kafka.range_reads import read_range

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
# Offsets closer than this are read through rather than seeked to: on loopback one seek (~4 ms) costs
# about as much as reading 500 small records (~7 us each), measured by benchmarks/pipeline_bench.py.
# Either way a read costs at most (own events x one seek), whatever the other traffic in the partition.
_MAX_GAP = 512
_POLL_S = 5.0


def _runs(positions: Sequence[LogPosition]) -> list[tuple[int, int, int]]:
    """Groups positions into (partition, first, last) runs whose gaps are at most _MAX_GAP."""
    runs: list[tuple[int, int, int]] = []
    for position in sorted(set(positions)):
        if runs and runs[-1][0] == position.partition and position.offset - runs[-1][2] <= _MAX_GAP:
            runs[-1] = (position.partition, runs[-1][1], position.offset)
        else:
            runs.append((position.partition, position.offset, position.offset))
    return runs


def _check(deadline: float | None, doing: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ReadDeadlineError(f"deadline passed while {doing}")


class KafkaEventLog:
    """Reads exactly the asked-for offsets, so the cost follows the case's own events, not the partition's traffic.

    One consumer is kept for the reader's lifetime; it belongs to no group and commits nothing.
    (Capping the prefetch queue, queued.max.messages.kbytes, was measured to make each seek ~30x slower.)
    """

    def __init__(self, client_config: dict[str, str], topic: str) -> None:
        self._topic = topic
        self._client_config = client_config
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": f"dpm-reader-{uuid.uuid4().hex}",  # required by librdkafka; never joined
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                # Small fetches: a seek then brings one batch, not a megabyte of other cases' records.
                "max.partition.fetch.bytes": 65_536,
                # The records asked for already exist: a fetch should answer at once, not long-poll for more.
                "fetch.wait.max.ms": 5,
            },
            logger=_LOG,
        )
        self._partitions: int | None = None

    def _read_run(self, partition: int, first: int, last: int, deadline: float | None) -> dict[int, RawRecord]:
        """Records of one partition from `first` through `last` (or the partition's end).

        The deadline is checked before the run and every 1,024 records of it (a scan reads a whole partition).
        """
        doing = f"reading {self._topic}[{partition}] from offset {first}"
        _check(deadline, doing)
        records: dict[int, RawRecord] = {}
        for record in read_range(self._consumer, self._topic, partition, first, last=last, timeout_s=_POLL_S):
            records[record.position.offset] = record
            if len(records) % 1024 == 0:
                _check(deadline, doing)
        return records

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        count = self._partition_count()
        outside = next((p for p in positions if not 0 <= p.partition < count), None)
        if outside is not None:
            raise PositionOutOfRangeError(f"partition {outside.partition} does not exist ({self._topic} has {count})")
        try:
            found: dict[LogPosition, RawRecord] = {}
            for partition, first, last in _runs(positions):
                for offset, record in self._read_run(partition, first, last, deadline).items():
                    found[LogPosition(partition, offset)] = record
        except KafkaException as exc:
            raise KafkaAdapterError(f"reading {self._topic} failed: {exc}") from exc
        wanted = [p for p in positions if p in found and found[p].value is not None]
        missing = tuple(p for p in positions if p not in found or found[p].value is None)
        return ReadResult(tuple(found[p] for p in wanted), missing)

    def _partition_count(self) -> int:
        if self._partitions is None:
            self._partitions = topic_partitions(self._client_config, self._topic)
        return self._partitions

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        """Every record keyed `tenant/case/...` in the case's partition (cost: the whole partition)."""
        partition = case_partition(case, self._partition_count())
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(self._topic, partition), timeout=10)
            if high <= low:
                return ReadResult(())
            records = self._read_run(partition, low, high - 1, deadline)
        except KafkaException as exc:
            raise KafkaAdapterError(f"scanning {self._topic}[{partition}] failed: {exc}") from exc
        prefix = f"{case.key}/".encode()
        return ReadResult(
            tuple(r for _, r in sorted(records.items()) if r.key and r.key.startswith(prefix) and r.value)
        )

    def close(self) -> None:
        self._consumer.close()
