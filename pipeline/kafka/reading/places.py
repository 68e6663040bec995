"""Reads records at known places (topic, partition and offset, packed by index_store.place): a lookup's reads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.admin import reader_group
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.index_store import place, unplace
from pipeline.kafka.reading.range_reads import raw_record

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
READ_TIMEOUT_S = 10.0

Place = tuple[str, int]  # a record's topic and place


class PlaceReader:
    """One consumer (made on first use, kept between reads) that reads records at places. Thread-safe."""

    def __init__(self, client_config: dict[str, str]) -> None:
        self._config = client_config
        self._lock = threading.Lock()
        self._consumer: Consumer | None = None

    def read(self, places: Iterable[Place]) -> dict[Place, RawRecord]:
        """The records at `places`, in one assignment: each partition read from its first place to its last.

        The places of one lookup lie close together (a decision's records are one transaction's),
        so reading through what lies between costs less than a seek each. A place that holds no
        record any more is missing from the answer. Raises KafkaAdapterError.
        """
        wanted: dict[tuple[str, int], set[int]] = {}
        for topic, where in places:
            partition, offset = unplace(where)
            wanted.setdefault((topic, partition), set()).add(offset)
        if not wanted:
            return {}
        with self._lock:
            try:
                return self._read(wanted)
            except KafkaException as exc:
                self._reset()
                raise KafkaAdapterError(f"reading records at their places failed: {exc}") from exc

    def _read(self, wanted: Mapping[tuple[str, int], set[int]]) -> dict[Place, RawRecord]:
        consumer = self._consumer = self._consumer or _consumer(self._config)
        last = {tp: max(offsets) for tp, offsets in wanted.items()}
        consumer.assign([TopicPartition(topic, p, min(offsets)) for (topic, p), offsets in wanted.items()])
        found: dict[Place, RawRecord] = {}
        try:
            while last:
                msg = consumer.poll(READ_TIMEOUT_S)
                if msg is None:
                    raise KafkaAdapterError(f"timed out reading records at their places in {sorted(last)}")
                tp = (msg.topic() or "", msg.partition() or 0)
                if tp not in last:
                    continue  # fetched for an earlier read before its partition was unassigned
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaAdapterError(f"reading {tp[0]}[{tp[1]}] failed: {error.str()}")
                    del last[tp]
                    continue
                offset = msg.offset() or 0
                if offset in wanted[tp]:
                    found[(tp[0], place(tp[1], offset))] = raw_record(msg)
                if offset >= last[tp]:
                    del last[tp]
        finally:
            consumer.unassign()
        return found

    def _reset(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                _LOG.debug("closing a failed reader: %s", exc)
            self._consumer = None

    def close(self) -> None:
        with self._lock:
            self._reset()


def _consumer(client_config: dict[str, str]) -> Consumer:
    return Consumer(
        {**client_config, "group.id": reader_group("lookup"), "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5},
        logger=_LOG,
    )  # fmt: skip
