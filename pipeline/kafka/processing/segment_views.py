"""Segment views in a compacted topic, so any worker reuses the views any worker computed for a case.

Why a compacted topic: a view is immutable and addressed by its content (the model and the exact
request), so the newest record per key is the only one worth keeping, and a tombstone per key is
how erasure removes it; the topic is the log the workers already trust, needs no other store to
run or back up, and every view in it is sealed under its case's data key, so destroying the key
makes them unreadable with everything else. Records sit on the case's partition (as its events
do), so finding a case's views means reading one partition.

Workers stay stateless: each keeps the views it read or computed in a memory cache bounded by
characters, and on a decision's first miss reads its partition's records written since it last
read it (read_committed: a view of an aborted transaction never counts). A view that cannot be
read (erased, sealed without keys, malformed) is skipped; core/segments.py recomputes whatever is
missing and trusts nothing it cannot check. A view computed for a decision is published in the
decision's own transaction.
"""

from __future__ import annotations

import logging
import threading

from cachetools import LRUCache
from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.steps import Output
from pipeline.kafka.reading.range_reads import read_range, renewed
from pipeline.keys.providers import KeyServiceError
from pipeline.wire.headers import standard_headers
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.segment import SegmentViewRecord

_LOG = logging.getLogger("pipeline.kafka.processing.segment_views")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
DEFAULT_CACHE_CHARS = 64_000_000  # about 12,000 views at the default budget


class SegmentViews:
    """The segments topic as a cache of views; thread-safe (the worker decides triggers side by side)."""

    def __init__(self, client_config: dict[str, str], topic: str, cipher: CaseCipher | None, *, seal: bool,
                 source: str, max_chars: int = DEFAULT_CACHE_CHARS) -> None:  # fmt: skip
        self._config, self._topic, self._cipher = client_config, topic, cipher
        self._sealing = cipher if seal else None
        self._source = source
        self._views: LRUCache[tuple[str, str], str] = LRUCache(maxsize=max_chars, getsizeof=len)
        self._read_to: dict[int, int] = {}  # partition -> the next offset to read
        self._partitions: int | None = None
        self._lock = threading.Lock()
        self._reader = self._connect()

    def _connect(self) -> Consumer:
        return Consumer(
            {**self._config, "group.id": reader_group("segments"), "enable.auto.commit": False,
             "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5},
            logger=_LIB_LOG,
        )  # fmt: skip

    def for_case(self, case: CaseRef) -> CaseSegmentViews:
        """The store one decision of `case` uses (its views go out with the decision's outputs)."""
        return CaseSegmentViews(self, case)

    def partition_of(self, case: CaseRef) -> int | None:
        """The case's partition of the segments topic; None while the topic cannot be described."""
        if self._partitions is None:
            try:
                self._partitions = topic_partitions(self._config, self._topic)
            except KafkaAdapterError as exc:
                _LOG.warning("segment views are not reused: %s", exc)
                return None
        return case_partition(case, self._partitions)

    def cached(self, case: CaseRef, key: str) -> str | None:
        with self._lock:
            return self._views.get((case.key, key))

    def remember(self, case: CaseRef, key: str, view: str) -> None:
        with self._lock:
            self._views[(case.key, key)] = view

    def catch_up(self, partition: int) -> None:
        """Reads the partition's views written since it was last read; a failure leaves the cache as it was."""
        with self._lock:
            try:
                low, high = self._reader.get_watermark_offsets(TopicPartition(self._topic, partition), timeout=10)
                first = max(low, self._read_to.get(partition, low))
                if high > first:
                    for raw in read_range(self._reader, self._topic, partition, first, last=high - 1, timeout_s=10):
                        self._take(raw.key, raw.value)
                self._read_to[partition] = max(first, high)
            except (KafkaException, KafkaAdapterError) as exc:
                self._reader = renewed(self._reader, self._connect)
                _LOG.warning("segment views of %s[%d] not read: %s", self._topic, partition, exc)

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        """One record into the cache (a tombstone out of it); one that cannot be read is skipped."""
        parts = (key or b"").decode("utf-8", "replace").rsplit("/", 1)
        if len(parts) != 2:
            return
        if value is None:
            self._views.pop((parts[0], parts[1]), None)
            return
        try:
            record = SegmentViewRecord.decode(value, self._cipher)
        except (RejectedError, KeyServiceError):  # a cache: a view not readable now is projected again if needed
            self._views.pop((parts[0], parts[1]), None)
            return
        if (record.case.key, record.segment_key) == (parts[0], parts[1]):
            self._views[(parts[0], parts[1])] = record.view

    def output(self, record: SegmentViewRecord, partition: int) -> Output:
        headers = standard_headers(SchemaId.SEGMENT, source=self._source, tenant=record.case.tenant,
                                   event_id=f"{record.case.key}/segment/{record.segment_key}")  # fmt: skip
        return Output(self._topic, record.record_key, record.encode(self._sealing), headers, partition=partition)

    def close(self) -> None:
        self._reader.close()


class CaseSegmentViews:
    """A SegmentStore for one decision of one case: reads through the shared cache, collects what it computed."""

    def __init__(self, views: SegmentViews, case: CaseRef) -> None:
        self._views, self._case = views, case
        self._partition = views.partition_of(case)
        self._caught_up = False
        self._written: list[SegmentViewRecord] = []

    def get(self, key: str) -> str | None:
        view = self._views.cached(self._case, key)
        if view is None and not self._caught_up and self._partition is not None:
            self._caught_up = True  # once per decision: its other misses are views nobody has computed yet
            self._views.catch_up(self._partition)
            view = self._views.cached(self._case, key)
        return view

    def put(self, key: str, view_text: str) -> None:
        self._views.remember(self._case, key, view_text)
        self._written.append(SegmentViewRecord(self._case, key, view_text))

    def outputs(self) -> list[Output]:
        """The views this decision computed, as records of the segments topic (nothing when it is missing)."""
        if self._partition is None:
            return []
        return [self._views.output(record, self._partition) for record in self._written]
