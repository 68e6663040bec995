"""Producer API: append events to a case's log and request decisions, returning log positions."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pipeline.core.events import Event, LogPosition
from pipeline.kafka.cluster.admin import topic_partitions
from pipeline.kafka.cluster.layout import current_names
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.wire.event import CaseOpening, sealed_values
from pipeline.wire.headers import Headers, standard_headers
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import DecisionRequest

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
SOURCE = "/dpm/producer"  # the CloudEvents source of the events and triggers this API writes


class EventProducer:
    """Idempotent (acks=all) producer of events and triggers.

    Every event of a case goes to the partition derived from `tenant/case`, keyed
    `tenant/case/seq`, with the standard headers (the tenant among them); appends return
    delivery positions. Events and triggers go to the shared topics' current generation, and not at
    all while a partition count differs from the layout's (LayoutError): a case's new events would
    land apart from its old ones. Tombstones (erase) go wherever they are sent, layout or not: the
    right to erasure does not wait for a repaired layout.
    """

    def __init__(self, client_config: dict[str, str], names: TopicNames, cipher: CaseCipher | None = None) -> None:
        self._names = names
        self._current: TopicNames | None = None if names.tenant is None else names  # resolved on first use
        self._cipher = cipher  # seals each event's text under its case's data key (None: in clear)
        self._producer = Producer(
            {**client_config, "enable.idempotence": True, "acks": "all", "linger.ms": 5, "compression.type": "lz4"},
            logger=_LOG,
        )
        self._partitions: dict[str, int] = {}
        self._admin_config = client_config

    def _inputs(self) -> TopicNames:
        """The topics events and triggers go to: a tenant's own, or the shared ones' current generation (checked)."""
        if self._current is None:
            self._current = current_names(self._admin_config, self._names)[0]
        return self._current

    @property
    def inputs(self) -> TopicNames:
        """The topics this producer writes events and triggers to (resolved on first use)."""
        return self._inputs()

    def _partition_count(self, topic: str) -> int:
        if topic not in self._partitions:
            self._partitions[topic] = topic_partitions(self._admin_config, topic)
        return self._partitions[topic]

    def _send(self, topic: str, records: Sequence[tuple[str, int, bytes, Headers]]) -> list[LogPosition]:
        """Produces (key, partition, value, headers) records and waits for every delivery, in order."""
        positions: list[LogPosition | None] = [None] * len(records)
        failures: list[str] = []

        def delivered(slot: int) -> Any:  # noqa: ANN401 - librdkafka callback
            def callback(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    failures.append(f"{msg.key()!r}: {err.str()}")
                else:
                    positions[slot] = LogPosition(msg.partition() or 0, msg.offset() or 0)

            return callback

        try:
            for slot, (key, partition, value, headers) in enumerate(records):
                self._producer.produce(
                    topic,
                    key=key.encode("utf-8"),
                    value=value,
                    partition=partition,
                    headers=list(headers),
                    on_delivery=delivered(slot),
                )
                self._producer.poll(0)
            remaining = self._producer.flush(60)
        except (KafkaException, BufferError) as exc:
            raise KafkaAdapterError(f"producing to {topic} failed: {exc}") from exc
        if failures or remaining:
            raise KafkaAdapterError(f"{len(failures) or remaining} record(s) to {topic} not delivered: {failures[:3]}")
        return [p for p in positions if p is not None]

    def append(self, events: Iterable[Event], opening: CaseOpening | None = None) -> list[LogPosition]:
        """Appends events to the events topic; returns their positions in order.

        `opening` (the case's standing task and Summ-only budgets) rides on the event with seq 1.
        """
        topic = self._inputs().events
        count = self._partition_count(topic)
        keyed = [(e.key, case_partition(e.case, count), value,
                  standard_headers(SchemaId.EVENT, source=SOURCE, event_id=e.key, tenant=e.case.tenant))
                 for e, value in sealed_values(events, opening, self._cipher)]  # fmt: skip
        return self._send(topic, keyed)

    def trigger(self, request: DecisionRequest) -> LogPosition:
        """Publishes a decision request keyed `tenant/case` on the case's partition of the triggers topic."""
        return self.triggers([request])[0]

    def triggers(self, requests: Iterable[DecisionRequest]) -> list[LogPosition]:
        """Publishes decision requests in one flush; returns their positions in order."""
        topic = self._inputs().triggers
        count = self._partition_count(topic)
        records = [(r.case.key, case_partition(r.case, count), r.encode(),
                    standard_headers(SchemaId.TRIGGER, source=SOURCE, event_id=r.trigger_id, tenant=r.case.tenant))
                   for r in requests]  # fmt: skip
        return self._send(topic, records)

    def erase(self, tenant: str, records: Iterable[tuple[bytes, int]], topic: str | None = None) -> int:
        """Writes a tombstone for each (key, partition) of the erased records (the right to erasure); returns how many.

        Each tombstone goes where its record is, under the record's own key, whatever case that key
        names (erasure also finds the case's records filed under other keys). Compaction then removes
        the records and, after delete.retention.ms, the tombstones: replays of decisions that read
        them report ERASED from then on.
        """
        topic = topic or self._inputs().events
        count = 0
        try:
            for key, partition in records:
                erased_id = f"{key.decode('utf-8', 'replace')}/erased/{uuid.uuid4().hex}"  # the event keeps its own id
                headers = standard_headers(SchemaId.EVENT, source=SOURCE, event_id=erased_id, tenant=tenant,
                                           tombstone=True)  # fmt: skip
                self._producer.produce(topic, key=key, value=None, partition=partition, headers=list(headers))
                count += 1
            remaining = self._producer.flush(60)
        except (KafkaException, BufferError) as exc:
            raise KafkaAdapterError(f"erasing records of {tenant} failed: {exc}") from exc
        if remaining:
            raise KafkaAdapterError(f"{remaining} tombstone(s) of {tenant}'s records not delivered")
        return count

    def close(self) -> None:
        self._producer.flush(30)
