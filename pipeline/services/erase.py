"""The right to erasure: destroy the data key (crypto-shredding), tombstone the events; key rotation."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames
from pipeline.keys.store import Rotation


@dataclass(frozen=True)
class Erasure:
    """What one erasure destroyed: data keys (tombstones on the key topic) and event tombstones written."""

    subject: str
    keys_destroyed: int
    event_tombstones: int


def _tombstone_events(settings: Settings, case: CaseRef) -> int:
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    with closing(KafkaEventLog(config, names.events)) as log:
        keys = [r.key for r in log.scan(case).records if r.key is not None]
    if not keys:
        return 0
    producer = EventProducer(config, names)
    try:
        return producer.erase(case, keys)
    finally:
        producer.close()


def erase_case(settings: Settings, case: CaseRef) -> Erasure:
    """Destroys the case's data key, then tombstones its events.

    From the key's tombstone on, every reader treats the case as erased; compaction removes the
    events (and the key record) within the topics' erasure bound.
    """
    with closing(case_keys_from(settings)) as keys:
        had_key = keys.erase_case(case)
    tombstones = _tombstone_events(settings, case)
    if not had_key and not tombstones:
        raise DpmError(f"no key and no events of {case.key}: nothing to erase")
    return Erasure(case.key, int(had_key), tombstones)


def erase_tenant(settings: Settings, tenant: str) -> Erasure:
    """Destroys every key-encryption key of the tenant and tombstones each of its cases' data keys and events."""
    with closing(case_keys_from(settings)) as keys:
        cases = keys.erase_tenant(tenant)
    tombstones = sum(_tombstone_events(settings, case) for case in cases)
    if not cases:
        raise DpmError(f"no keys of tenant {tenant!r}: nothing to erase")
    return Erasure(tenant, len(cases), tombstones)


def rotate_tenant_key(settings: Settings, tenant: str) -> Rotation:
    """A new key-encryption key for the tenant: every data key wrapped again, the old versions destroyed."""
    with closing(case_keys_from(settings)) as keys:
        return keys.rotate(tenant)
