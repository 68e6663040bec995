"""The right to erasure: tombstones for every event of a case (what `dpm erase` does)."""

from __future__ import annotations

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames


def erase_case(settings: Settings, case: CaseRef) -> int:
    """Writes a tombstone for each event key of `case`; returns how many. Compaction removes the events."""
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    log = KafkaEventLog(config, names.events)
    try:
        keys = [r.key for r in log.scan(case).records if r.key is not None]
    finally:
        log.close()
    if not keys:
        raise DpmError(f"no events of {case.key} in {names.events}")
    producer = EventProducer(config, names)
    try:
        return producer.erase(case, keys)
    finally:
        producer.close()
