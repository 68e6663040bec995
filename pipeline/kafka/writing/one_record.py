"""One record written and waited for: what a command stores now and then (a layout, a contest), not a stream."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pipeline.kafka.errors import KafkaAdapterError
from pipeline.wire.headers import Headers

_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


def produce_one(client_config: dict[str, str], topic: str, key: bytes, value: bytes, headers: Headers,
                *, timeout_s: float = 30.0) -> None:  # fmt: skip
    """Writes one record (idempotent, acks=all) and returns once the broker has it; KafkaAdapterError otherwise."""
    producer = Producer({**client_config, "enable.idempotence": True, "acks": "all"}, logger=_LIB_LOG)
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    try:
        producer.produce(topic, key=key, value=value, headers=list(headers), on_delivery=delivered)
        remaining = producer.flush(timeout_s)
    except (KafkaException, BufferError) as exc:
        raise KafkaAdapterError(f"writing to {topic} failed: {exc}") from exc
    if failures or remaining:
        raise KafkaAdapterError(f"the record was not stored in {topic}: {failures or f'{remaining} undelivered'}")
