"""The right to erasure: destroy the data key (crypto-shredding), tombstone the events; key rotation."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from functools import partial

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.keys.store import Rotation
from pipeline.wire.record_keys import names_case, names_tenant


@dataclass(frozen=True)
class Erasure:
    """What one erasure destroyed: data keys (tombstones on the key topic) and event tombstones written."""

    subject: str
    keys_destroyed: int
    event_tombstones: int


Names = Callable[[bytes | None, bytes | None], bool]  # whether a record's key or value names the erased subject


def records_of(config: dict[str, str], topic: str, named: Names) -> list[tuple[bytes, int]]:
    """(key, partition) of every live record of the events topic that `named` picks, however keyed or placed.

    The whole topic is read: a record whose key names another case, or that sits in another
    partition than its case's, is found by its value. Only what a key's latest record says counts:
    a key whose newest record names someone else (or is a tombstone) is not the subject's any more.
    """
    latest: dict[tuple[bytes, int], bool] = {}  # keys that ever named the subject -> whether the newest does
    for record in read_topic(config, topic):
        if record.key is None:
            continue  # a compacted topic refuses records without a key
        where = (record.key, record.position.partition)
        if named(record.key, record.value):
            latest[where] = record.value is not None
        elif where in latest:
            latest[where] = False
    return [where for where, live in latest.items() if live]


def _tombstone_events(settings: Settings, subject: CaseRef | str) -> int:
    """Tombstones every live record of the events topic that names the case (or any case of the tenant)."""
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    if isinstance(subject, CaseRef):
        found = records_of(config, names.events, partial(_case_named, subject))
    else:
        found = records_of(config, names.events, partial(_tenant_named, subject))
    if not found:
        return 0
    producer = EventProducer(config, names)
    try:
        return producer.erase(subject if isinstance(subject, str) else subject.tenant, found)
    finally:
        producer.close()


def _case_named(case: CaseRef, key: bytes | None, value: bytes | None) -> bool:
    return names_case(key, value, case)


def _tenant_named(tenant: str, key: bytes | None, value: bytes | None) -> bool:
    return names_tenant(key, value, tenant)


def erase_case(settings: Settings, case: CaseRef) -> Erasure:
    """Destroys the case's data key, then tombstones every record of the events topic that names the case.

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
    tombstones = _tombstone_events(settings, tenant)  # one pass over the topic for all the tenant's cases
    if not cases and not tombstones:
        raise DpmError(f"no keys and no events of tenant {tenant!r}: nothing to erase")
    return Erasure(tenant, len(cases), tombstones)


def rotate_tenant_key(settings: Settings, tenant: str) -> Rotation:
    """A new key-encryption key for the tenant: every data key wrapped again, the old versions destroyed."""
    with closing(case_keys_from(settings)) as keys:
        return keys.rotate(tenant)
