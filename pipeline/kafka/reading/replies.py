"""One reader of the workers' replies (decisions, views, dead letters) per client, from where they end now on.

A client that waits for decisions would need a consumer per waiting call if each read the output
topics itself; this reader is one consumer on one thread for every waiter of the process. It
assigns every partition of its topics at their current end before anything is asked (so no reply
to a request sent afterwards can be missed), reads committed records only (a decision becomes
visible with its transaction), and hands each record to the caller's router on its own thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, wrapped
from pipeline.kafka.reading.range_reads import raw_record

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_POLL_S = 0.2
_RETRY_S = 1.0
START_TIMEOUT_S = 15.0  # at most this long waiting for a cluster just back to say where the replies end


class ReplyReader:
    """Reads `topics` from their ends as of `start()`, calling `route(record)` for each committed record."""

    def __init__(self, client_config: dict[str, str], topics: Sequence[str],
                 route: Callable[[RawRecord], None]) -> None:  # fmt: skip
        self._config, self._topics, self._route = client_config, tuple(topics), route
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Lock()
        self.failure: str | None = None  # why the reader stopped early, if it did

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Positions the reader at the topics' ends and starts its thread (once; later calls return at once).

        A cluster that does not answer, or is not ready (just back), is asked again for up to
        `timeout_s`; then BrokerUnavailableError.
        """
        with self._started:
            if self._thread is not None:
                return
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    self._consumer = self._positioned()
                    break
                except BrokerUnavailableError:
                    if time.monotonic() + _RETRY_S > deadline:
                        raise
                    time.sleep(_RETRY_S)
            self._thread = threading.Thread(target=self._run, name="dpm-replies", daemon=True)
            self._thread.start()

    def _positioned(self) -> Consumer:
        consumer = Consumer({**self._config, "group.id": reader_group("replies"), "enable.auto.commit": False,
                             "isolation.level": "read_committed", "fetch.wait.max.ms": 20}, logger=_LOG)  # fmt: skip
        try:
            consumer.assign(self._ends(consumer))
        except KafkaException as exc:
            consumer.close()
            raise wrapped(exc, f"reading the replies on {', '.join(self._topics)} failed") from exc
        except KafkaAdapterError:
            consumer.close()
            raise
        return consumer

    def _ends(self, consumer: Consumer) -> list[TopicPartition]:
        """Every partition of the topics at its current end (the next offset to be written)."""
        assigned = []
        for topic in self._topics:
            for partition in range(topic_partitions(self._config, topic)):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                assigned.append(TopicPartition(topic, partition, high))
        return assigned

    def _run(self) -> None:
        consumer = self._consumer
        while consumer is not None and not self._stop.is_set():
            try:  # wait for one record at most _POLL_S, then take what else is there (consume waits to fill up)
                first = consumer.poll(_POLL_S)
                messages = [] if first is None else [first, *consumer.consume(500, 0)]
            except KafkaException as exc:  # the consumer itself failed: waiters are told by the caller's timeout
                self.failure = str(exc)
                _LOG.error("the replies reader stopped: %s", exc)
                return
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        _LOG.warning("reading replies: %s", error.str())
                    continue
                self._deliver(replace(raw_record(message), topic=message.topic()))

    def _deliver(self, record: RawRecord) -> None:
        try:
            self._route(record)
        except Exception:  # noqa: BLE001 - a record the router cannot take must not stop every other waiter's replies
            _LOG.exception("a reply at %s of %s could not be routed", record.position, record.topic)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
