"""KafkaEventLog: reads a case's events by explicit offset (assign and seek, no consumer group)."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.event_log import PositionOutOfRangeError, RawRecord, ReadDeadlineError, ReadResult
from pipeline.core.events import CaseRef, LogPosition
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.range_reads import latest_offsets, read_points, read_range, renewed

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
# Offsets at most this far apart are read through as one run; farther ones are read by seeking. Here
# (2 cores, loopback) reading past a record costs about 2 us and a far position about 0.25 ms with
# POINT_READERS seeking side by side (0.4 ms of CPU, broker and client together), so they break even
# near 128 records; either way a read costs at most about (own events x one seek), whatever the
# other traffic in the partition (figures: benchmarks/pipeline_bench.py, read section).
_MAX_GAP = 128
# Consumers that read isolated positions side by side: the seeks' round trips overlap. More do not
# help on 2 cores (12 measured the same as 8; 4 took a third longer).
POINT_READERS = 8
_POLL_S = 5.0
# fetch.wait.max.ms: every record asked for already exists, so a fetch has no reason to long-poll. With
# a wait, the fetch librdkafka sends past the last record read (at the log's end) is held by the broker
# for that long, and the next read's first fetch queues behind it on the same connection: at 5 ms,
# back-to-back reads of a 90-event case took 6.7 ms instead of 1.6. At 0, reading through other
# traffic got slower (100x: 24 ms against 18.5), so the run reader waits 1 ms.
_RUN_FETCH = {"max.partition.fetch.bytes": 262_144, "fetch.wait.max.ms": 1}
# A point reader's fetch brings one record batch (max.partition.fetch.bytes 1). Right after the
# batch it wants, librdkafka fetches the next one (prefetch), which the next seek throws away, often
# after parsing it: CPU for nothing on both sides. With queued.min.messages 1 that prefetch waits
# fetch.queue.backoff.ms, by which time a seek has usually replaced it. A seek does not cut that wait
# short (at 5 ms a far position took 2.5 ms), so it stays at 1 ms: 40% less CPU per far position.
POINT_FETCH = {"max.partition.fetch.bytes": 1, "fetch.wait.max.ms": 0, "queued.min.messages": 1,
                "fetch.queue.backoff.ms": 1}  # fmt: skip


@dataclass(frozen=True)
class _Run:
    """Positions of one partition close enough together to read through."""

    partition: int
    offsets: tuple[int, ...]  # ascending


def _runs(positions: Sequence[LogPosition]) -> list[_Run]:
    """Groups positions into runs of one partition whose gaps are at most _MAX_GAP."""
    runs: list[tuple[int, list[int]]] = []
    for position in sorted(set(positions)):
        if runs and runs[-1][0] == position.partition and position.offset - runs[-1][1][-1] <= _MAX_GAP:
            runs[-1][1].append(position.offset)
        else:
            runs.append((position.partition, [position.offset]))
    return [_Run(partition, tuple(offsets)) for partition, offsets in runs]


def _chunks(runs: Sequence[_Run], count: int) -> list[list[_Run]]:
    """Isolated positions spread over at most `count` readers, each keeping its share in offset order."""
    size = -(-len(runs) // count)
    return [list(runs[i : i + size]) for i in range(0, len(runs), size)]


def _check(deadline: float | None, doing: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ReadDeadlineError(f"deadline passed while {doing}")


class KafkaEventLog:
    """Reads exactly the asked-for offsets, so the cost follows the case's own events, not the partition's traffic.

    Close positions are read through on one consumer, keeping only the records asked for; isolated
    positions are read by seeking, spread over POINT_READERS consumers whose fetches bring one record
    batch each. None of them belongs to a group or commits anything.
    """

    def __init__(self, client_config: dict[str, str], topic: str, point_readers: int = POINT_READERS) -> None:
        self._topic = topic
        self._client_config = client_config
        # A run's fetches may be large: it wants most of what lies between its first and last offset.
        self._consumer = self._new_consumer(_RUN_FETCH)
        self._point_readers = point_readers
        self._points: list[Consumer] = []  # made on first use
        self._pool: ThreadPoolExecutor | None = None
        self._partitions: int | None = None
        self._ends: dict[int, int] = {}  # partition -> its end (next offset) when last asked

    def _new_consumer(self, fetch: dict[str, int]) -> Consumer:
        return Consumer(
            {
                **self._client_config,
                "group.id": reader_group("events"),  # required by librdkafka; never joined
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                **fetch,
            },
            logger=_LOG,
        )

    def _read_run(self, run: _Run, deadline: float | None) -> list[RawRecord]:
        doing = f"reading {self._topic}[{run.partition}] from offset {run.offsets[0]}"
        _check(deadline, doing)
        wanted = set(run.offsets)
        return list(read_range(self._consumer, self._topic, run.partition, run.offsets[0], last=run.offsets[-1],
                               timeout_s=_POLL_S, wanted=wanted))  # fmt: skip

    def _read_points(self, reader: Consumer, runs: Sequence[_Run], deadline: float | None) -> list[RawRecord]:
        """On a pool thread: the isolated positions of `runs`, each partition's in offset order."""
        found: list[RawRecord] = []
        by_partition: dict[int, list[int]] = {}
        for run in runs:
            by_partition.setdefault(run.partition, []).extend(run.offsets)
        for partition, offsets in by_partition.items():
            doing = f"reading {self._topic}[{partition}] at {len(offsets)} far-apart offsets"
            found += read_points(reader, self._topic, partition, offsets, timeout_s=_POLL_S,
                                 before_each=partial(_check, deadline, doing))  # fmt: skip
        return found

    def _isolated(self, runs: Sequence[_Run], deadline: float | None) -> list[Future[list[RawRecord]]]:
        if not runs:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._point_readers, thread_name_prefix="event-reader")
            self._points = [self._new_consumer(POINT_FETCH) for _ in range(self._point_readers)]
        pool = self._pool
        return [pool.submit(self._read_points, reader, chunk, deadline)
                for reader, chunk in zip(self._points, _chunks(runs, self._point_readers), strict=False)]  # fmt: skip

    def _check_written(self, positions: Sequence[LogPosition]) -> None:
        """Raises PositionOutOfRangeError for a partition the topic lacks or an offset not yet written.

        The partitions' ends are cached and asked again only for an offset at or past the cached one.
        """
        count = self._partition_count()
        outside = next((p for p in positions if not 0 <= p.partition < count), None)
        if outside is not None:
            raise PositionOutOfRangeError(f"partition {outside.partition} does not exist ({self._topic} has {count})")
        stale = {p.partition for p in positions if p.offset >= self._ends.get(p.partition, 0)}
        if stale:
            self._ends.update(latest_offsets(self._consumer, self._topic, sorted(stale)))
        past = next((p for p in positions if p.offset >= self._ends[p.partition]), None)
        if past is not None:
            end = self._ends[past.partition]
            raise PositionOutOfRangeError(
                f"offset {past.offset} of {self._topic}[{past.partition}] was never written (the log ends at {end})"
            )

    def _failed(self, exc: KafkaException, doing: str) -> KafkaAdapterError:
        """The error to raise for a failed request; the run consumer is renewed so the next read asks afresh."""
        self._consumer = renewed(self._consumer, lambda: self._new_consumer(_RUN_FETCH))
        return KafkaAdapterError(f"{doing} failed: {exc}")

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        try:
            self._check_written(positions)
        except KafkaException as exc:
            raise self._failed(exc, f"reading {self._topic}") from exc
        runs = _runs(positions)
        pending = self._isolated([r for r in runs if len(r.offsets) == 1], deadline)
        found: dict[LogPosition, RawRecord] = {}
        try:
            for run in runs:
                if len(run.offsets) > 1:
                    found.update((r.position, r) for r in self._read_run(run, deadline))
            for future in pending:
                found.update((r.position, r) for r in future.result())
        except KafkaException as exc:
            raise self._failed(exc, f"reading {self._topic}") from exc
        finally:
            wait(pending)  # no reader is left working for a read that has ended
        wanted = [p for p in positions if p in found and found[p].value is not None]
        missing = tuple(p for p in positions if p not in found or found[p].value is None)
        return ReadResult(tuple(found[p] for p in wanted), missing)

    def _partition_count(self) -> int:
        if self._partitions is None:
            self._partitions = topic_partitions(self._client_config, self._topic)
        return self._partitions

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        """Every record keyed `tenant/case/...` in the case's partition (cost: the whole partition).

        The deadline is checked every 1,024 records (a scan reads a whole partition).
        """
        partition = case_partition(case, self._partition_count())
        doing = f"scanning {self._topic}[{partition}]"
        prefix = f"{case.key}/".encode()
        records: list[RawRecord] = []
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(self._topic, partition), timeout=10)
            if high <= low:
                return ReadResult(())
            for n, record in enumerate(read_range(self._consumer, self._topic, partition, low, last=high - 1,
                                                  timeout_s=_POLL_S), start=1):  # fmt: skip
                if n % 1024 == 0:
                    _check(deadline, doing)
                if record.key and record.key.startswith(prefix) and record.value:
                    records.append(record)
        except KafkaException as exc:
            raise self._failed(exc, doing) from exc
        return ReadResult(tuple(records))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for reader in (self._consumer, *self._points):
            reader.close()


class PooledLog:
    """An event log whose every read borrows one of several Kafka readers, each used by one thread at a time.

    A caller (an auditor's page, a client's call) holds a reader only while it reads: a replay
    re-running a slow model holds none.
    """

    def __init__(self, readers: list[KafkaEventLog]) -> None:
        self._all = readers
        self._free: queue.LifoQueue[KafkaEventLog] = queue.LifoQueue()
        for reader in readers:
            self._free.put(reader)

    @contextmanager
    def _borrowed(self) -> Iterator[KafkaEventLog]:
        reader = self._free.get()
        try:
            yield reader
        finally:
            self._free.put(reader)

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        with self._borrowed() as reader:
            return reader.read(positions, deadline)

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        with self._borrowed() as reader:
            return reader.scan(case, deadline)

    def close(self) -> None:
        for reader in self._all:
            reader.close()
