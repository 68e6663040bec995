"""The right to erasure: destroy the data key (crypto-shredding), tombstone the events; key rotation."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from functools import partial

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.kafka.admin import topic_exists
from pipeline.kafka.keystore import KafkaKeyTopic, case_keys_from
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
from pipeline.keys.store import Rotation
from pipeline.services.tenants import topics_of
from pipeline.wire.record_keys import names_case, names_tenant
from pipeline.wire.segment import case_prefix


@dataclass(frozen=True)
class Erasure:
    """What one erasure destroyed: data keys (tombstones on the key topic), event and segment view tombstones."""

    subject: str
    keys_destroyed: int
    event_tombstones: int
    segment_tombstones: int = 0

    @property
    def found(self) -> bool:
        """Whether anything of the subject was left to destroy (False: never written, or erased already)."""
        return bool(self.keys_destroyed or self.event_tombstones or self.segment_tombstones)


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


def _tenant(subject: CaseRef | str) -> str:
    return subject if isinstance(subject, str) else subject.tenant


def _generations(settings: Settings, subject: CaseRef | str) -> list[TopicNames]:
    """The subject's topics in every generation, oldest first (growths keep the older ones: services/growth.py)."""
    current = topics_of(settings, _tenant(subject))
    return [current.of_generation(g) for g in range(1, current.generation + 1)]


def _tombstone_events(settings: Settings, subject: CaseRef | str) -> int:
    """Tombstones every live record of every generation's events topic that names the case (or the tenant's cases)."""
    config = settings.kafka.client_config()
    named = partial(_case_named, subject) if isinstance(subject, CaseRef) else partial(_tenant_named, subject)
    return sum(_tombstone(settings, names, subject, names.events, records_of(config, names.events, named))
               for names in _generations(settings, subject))  # fmt: skip


def _tombstone_segment_views(settings: Settings, subject: CaseRef | str) -> int:
    """Tombstones every segment view of the case (or the tenant's cases), found by the keys workers give them."""
    config = settings.kafka.client_config()
    prefix = case_prefix(subject) if isinstance(subject, CaseRef) else f"{subject}/".encode()
    tombstones = 0
    for names in _generations(settings, subject):
        if topic_exists(config, names.segments):  # topics created before segment views existed have none
            found = records_of(config, names.segments, partial(_keyed_under, prefix))
            tombstones += _tombstone(settings, names, subject, names.segments, found)
    return tombstones


def _destroy_retired_keys(settings: Settings, subject: CaseRef | str) -> None:
    """Tombstones the case's (or the tenant's cases') data keys in the key topics of retired generations.

    A growth copied every data key to the new generation; the copies left behind must go too, or
    an erased case could still be opened from an older key topic.
    """
    config = settings.kafka.client_config()
    for names in _generations(settings, subject)[:-1]:
        found = records_of(config, names.keys, partial(_holds_key_of, subject))
        topic = KafkaKeyTopic(config, names.keys)
        try:
            for key, _partition in found:
                tenant, _, case_id = key.decode().partition("/")
                topic.publish(CaseRef(tenant, case_id), None)
        finally:
            topic.close()


def _tombstone(
    settings: Settings, names: TopicNames, subject: CaseRef | str, topic: str, found: list[tuple[bytes, int]]
) -> int:
    if not found:
        return 0
    producer = EventProducer(settings.kafka.client_config(), names)
    try:
        return producer.erase(_tenant(subject), found, topic)
    finally:
        producer.close()


def _holds_key_of(subject: CaseRef | str, key: bytes | None, value: bytes | None) -> bool:
    """Whether a key topic's record is the case's data key (or one of the tenant's cases')."""
    del value  # wrapped: a key record is known by its key alone
    if key is None:
        return False
    return key == subject.key.encode() if isinstance(subject, CaseRef) else key.startswith(f"{subject}/".encode())


def _keyed_under(prefix: bytes, key: bytes | None, value: bytes | None) -> bool:
    del value  # sealed: a segment view is known by its key alone
    return key is not None and key.startswith(prefix)


def _case_named(case: CaseRef, key: bytes | None, value: bytes | None) -> bool:
    return names_case(key, value, case)


def _tenant_named(tenant: str, key: bytes | None, value: bytes | None) -> bool:
    return names_tenant(key, value, tenant)


def erase_case(settings: Settings, case: CaseRef) -> Erasure:
    """Destroys the case's data key, then tombstones every record of the events topic that names the case.

    From the key's tombstone on, every reader treats the case as erased; compaction removes the
    events (and the key record) within the topics' erasure bound. Idempotent: a case never written,
    or erased already, leaves nothing to destroy (`found` is False), which is not an error; nor is
    a tenant without topics of its own (tenancy by topic), which has no case.
    """
    if not _has_topics(settings, case.tenant):
        return Erasure(case.key, 0, 0, 0)
    with closing(case_keys_from(settings, names=topics_of(settings, case.tenant))) as keys:
        had_key = keys.erase_case(case)
    _destroy_retired_keys(settings, case)
    tombstones = _tombstone_events(settings, case)
    views = _tombstone_segment_views(settings, case)
    return Erasure(case.key, int(had_key), tombstones, views)


def _has_topics(settings: Settings, tenant: str) -> bool:
    """Whether the tenant's records have topics to be in: always the shared ones, with tenancy by topic its own."""
    if settings.kafka.tenancy != "topics":
        return True
    return topic_exists(settings.kafka.client_config(), topics_of(settings, tenant).keys)


def erase_tenant(settings: Settings, tenant: str) -> Erasure:
    """Destroys every key-encryption key of the tenant and tombstones each of its cases' data keys and events."""
    with closing(case_keys_from(settings, names=topics_of(settings, tenant))) as keys:
        cases = keys.erase_tenant(tenant)
    _destroy_retired_keys(settings, tenant)
    tombstones = _tombstone_events(settings, tenant)  # one pass over the topic for all the tenant's cases
    views = _tombstone_segment_views(settings, tenant)
    if not cases and not tombstones and not views:
        raise DpmError(f"no keys and no events of tenant {tenant!r}: nothing to erase")
    return Erasure(tenant, len(cases), tombstones, views)


def rotate_tenant_key(settings: Settings, tenant: str) -> Rotation:
    """A new key-encryption key for the tenant: every data key wrapped again, the old versions destroyed."""
    with closing(case_keys_from(settings, names=topics_of(settings, tenant))) as keys:
        return keys.rotate(tenant)
