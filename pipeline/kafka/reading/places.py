"""Reads records at known places (topic, partition and offset, packed by index_store.place): a lookup's reads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.admin import TopicFacts, reader_group
from pipeline.kafka.errors import KafkaAdapterError, wrapped
from pipeline.kafka.reading.index_store import place, unplace
from pipeline.kafka.reading.range_reads import closed_quietly, latest_offsets, raw_record
from pipeline.kafka.reading.reader import POINT_FETCH

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
READ_TIMEOUT_S = 10.0
NEAR = 256  # offsets apart that are read through rather than sought

Place = tuple[str, int]  # a record's topic and place


class PlaceReader:
    """One consumer (made on first use, kept between reads) that reads records at places. Thread-safe.

    `facts`: what the lookup side knows of its topics (ids, partition counts), shared by whatever
    reads through this reader (the output index, the case keys), each topic described once.
    """

    def __init__(self, client_config: dict[str, str], facts: TopicFacts | None = None) -> None:
        self._config = client_config
        self.facts = facts or TopicFacts(client_config)
        self._lock = threading.Lock()
        self._consumer: Consumer | None = None
        self._known: set[str] = set()  # topics whose metadata the consumer holds

    def read(self, places: Iterable[Place]) -> dict[Place, RawRecord]:
        """The records at `places`, all partitions in one assignment.

        Places near one another (a decision's records are one transaction's) are read through; a
        place farther than NEAR offsets from the last one read is sought, so a page of decisions
        spread over a year of records costs a seek each, not the records between them. A place that
        holds no record any more is missing from the answer. Raises KafkaAdapterError.
        """
        wanted: dict[tuple[str, int], set[int]] = {}
        for topic, where in places:
            partition, offset = unplace(where)
            wanted.setdefault((topic, partition), set()).add(offset)
        if not wanted:
            return {}
        with self._lock:
            try:
                return self._read({tp: sorted(offsets) for tp, offsets in wanted.items()})
            except KafkaException as exc:
                self._reset()
                raise KafkaAdapterError(f"reading records at their places failed: {exc}") from exc

    def connect(self) -> None:
        """Makes the reader's consumer now: librdkafka connects it in the background, while its owner goes on."""
        with self._lock:
            self._made()

    def _made(self) -> Consumer:
        """The reader's consumer, made now if it is not yet (the lock held)."""
        if self._consumer is None:
            self._consumer = _consumer(self._config)
        return self._consumer

    def ends(self, topic: str) -> dict[int, int]:
        """Each partition's end (its last stable offset), asked through this reader's connection.

        What a reader that keeps a file of places asks to learn whether anything was written since:
        through the connection the lookup opened anyway, not one of its own.
        """
        partitions = range(self.facts.partitions(topic))  # described once; asked, if at all, outside the lock
        with self._lock:
            try:
                consumer = self._made()
                if topic not in self._known:  # ListOffsets needs the leaders: asked by name (see _learn)
                    consumer.list_topics(topic, timeout=READ_TIMEOUT_S)
                    self._known.add(topic)
                return latest_offsets(consumer, topic, partitions)
            except KafkaException as exc:
                self._reset()
                raise wrapped(exc, f"asking the ends of {topic}") from exc

    def _read(self, pending: dict[tuple[str, int], list[int]]) -> dict[Place, RawRecord]:
        """Reads until every partition's places are found or passed.

        A partition is unassigned as soon as it is done: what the consumer fetched past its places
        (a whole record batch, thousands of records when its producer batched them) is dropped with it,
        not polled through while the other partitions finish. Polling through them had made one lookup
        in 1,000,000 records take 0.7 s.
        """
        consumer = self._made()
        self._learn(consumer, {topic for topic, _ in pending})
        consumer.incremental_assign([TopicPartition(topic, p, offsets[0]) for (topic, p), offsets in pending.items()])
        found: dict[Place, RawRecord] = {}
        try:
            while pending:
                msg = consumer.poll(READ_TIMEOUT_S)
                if msg is None:
                    raise KafkaAdapterError(f"timed out reading records at their places in {sorted(pending)}")
                tp = (msg.topic() or "", msg.partition() or 0)
                offsets = pending.get(tp)
                if offsets is None:
                    continue  # queued for a partition just unassigned
                error = msg.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaAdapterError(f"reading {tp[0]}[{tp[1]}] failed: {error.str()}")
                if error is None:
                    _take(consumer, msg, offsets, found)
                if error is not None or not offsets:  # its end (what is left holds no record), or all found
                    del pending[tp]
                    consumer.incremental_unassign([TopicPartition(*tp)])
        finally:
            if pending:
                consumer.incremental_unassign([TopicPartition(*tp) for tp in pending])
        return found

    def _learn(self, consumer: Consumer, topics: set[str]) -> None:
        """Asks for the metadata of topics this consumer has not read yet, before they are assigned.

        A topic first assigned to a consumer that already reads another waited about 1 s for its
        leaders (librdkafka looks topics up at most once a second): a lookup that reads the audit
        or contests topic after the decisions took a second more. Asked by name, it takes a request.
        A fresh consumer's first assignment is looked up at once: nothing to ask then.
        """
        if self._known:
            for topic in sorted(topics - self._known):
                consumer.list_topics(topic, timeout=READ_TIMEOUT_S)
        self._known |= topics

    def _reset(self) -> None:
        if self._consumer is not None:
            closed_quietly(self._consumer)
            self._consumer = None
            self._known.clear()

    def close(self) -> None:
        with self._lock:
            self._reset()


def _consumer(client_config: dict[str, str]) -> Consumer:
    """A consumer whose fetches bring one record batch each (reader.POINT_FETCH).

    A lookup at an old place of a long topic then reads that batch, not the megabyte after it: at
    1,000,000 records a topic, 1 MB fetches made a warm lookup 77 ms.
    """
    return Consumer(
        {**client_config, "group.id": reader_group("lookup"), "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True, **POINT_FETCH},
        logger=_LOG,
    )  # fmt: skip


def _take(consumer: Consumer, msg: Message, offsets: list[int], found: dict[Place, RawRecord]) -> None:
    """Keeps the record if its place is wanted, drops places passed (compacted away), seeks to a far next place."""
    topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
    if offset < offsets[0]:
        return  # read through on the way, or queued before a seek
    while offsets and offsets[0] < offset:
        offsets.pop(0)
    if offsets and offsets[0] == offset:
        found[(topic, place(partition, offset))] = raw_record(msg)
        offsets.pop(0)
    if offsets and offsets[0] - offset > NEAR:
        consumer.seek(TopicPartition(topic, partition, offsets[0]))
