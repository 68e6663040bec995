"""The right to erasure: destroy the data key (crypto-shredding), tombstone the events; key rotation.

An erasure is four steps, each safe to repeat: destroy the data key (from then on every reader
treats the case as erased), destroy its copies in retired generations' key topics, tombstone the
events, tombstone the segment views. A step finds only what is still live, so an erasure run again
does only what is left, and one of a case never written, or erased already, succeeds doing nothing.
A step that fails stops the erasure with ErasureIncompleteError, which says which steps are done,
which are left, and to run it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from functools import partial

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.admin import topic_exists
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import KafkaKeyTopic, case_keys_from
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import Rotation
from pipeline.services.lookups import open_index
from pipeline.services.tenants import topics_of
from pipeline.wire.record_keys import names_case, names_tenant
from pipeline.wire.segment import case_prefix

_LOG = logging.getLogger("pipeline.services.erase")


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


def _destroy_retired_keys(settings: Settings, subject: CaseRef | str) -> int:
    """Tombstones the case's (or the tenant's cases') data keys in the key topics of retired generations.

    A growth copied every data key to the new generation; the copies left behind must go too, or
    an erased case could still be opened from an older key topic.
    """
    config = settings.kafka.client_config()
    destroyed = 0
    for names in _generations(settings, subject)[:-1]:
        found = records_of(config, names.keys, partial(_holds_key_of, subject))
        topic = KafkaKeyTopic(config, names.keys)
        try:
            cases = [CaseRef(*key.decode().split("/", 1)) for key, _partition in found]
            topic.publish([(case, None) for case in cases])
            destroyed += len(cases)
        finally:
            topic.close()
    return destroyed


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


# Names no case or tenant: the message goes to the API's log, and an erased subject's ids are not logged.
_AGAIN = "run the same erasure again (`dpm erase`, or the admin DELETE)"


class ErasureIncompleteError(DpmError):
    """An erasure stopped part way; the message says what is done, what is left, and to run it again."""


@dataclass(frozen=True)
class _Step:
    done: str  # what is true once the step ran, e.g. "the data key is destroyed"
    left: str  # what is left while it has not, e.g. "the data key is not yet destroyed"
    run: Callable[[], int]  # returns how many records it destroyed or tombstoned


def _run(steps: list[_Step], again: str) -> list[int]:
    """Runs the steps in order; the first that fails raises ErasureIncompleteError naming what is done and left."""
    counts: list[int] = []
    for n, step in enumerate(steps):
        try:
            counts.append(step.run())
        except (DpmError, OSError) as exc:
            done = "; ".join(s.done for s in steps[:n]) or "nothing is erased yet"
            left = "; ".join(s.left for s in steps[n:])
            raise ErasureIncompleteError(f"the erasure stopped ({exc}): {done}; {left}: {again} (every step is "
                                         "safe to repeat: it does only what is left)") from exc  # fmt: skip
    return counts


def _destroy_key(settings: Settings, case: CaseRef) -> int:
    with closing(case_keys_from(settings, names=topics_of(settings, case.tenant))) as keys:
        return int(keys.erase_case(case))


def _destroy_keks(settings: Settings, tenant: str) -> int:
    with closing(case_keys_from(settings, names=topics_of(settings, tenant))) as keys:
        return len(keys.erase_tenant(tenant))


def _mark_indexed(settings: Settings, subject: CaseRef | str) -> int:
    """Marks the subject's decisions erased in this host's lookup index (another host's learns on its next read).

    The last step, and one that cannot stop the erasure: the key is destroyed and the records
    tombstoned before it, and a lookup on any host answers an erased case's decision as erased
    whether or not its index says so (the record no longer opens). The mark spares it the read.
    """
    names = topics_of(settings, _tenant(subject))
    config = settings.kafka.client_config()
    try:
        if not topic_exists(config, names.decisions):
            return 0
        with closing(open_index(settings, names, config)) as index:
            if isinstance(subject, CaseRef):
                return index.mark_erased(subject.tenant, [subject.case_id])
            return index.store.mark_tenant_erased(subject)
    except DpmError as exc:
        _LOG.warning("this host's lookup index was not marked after an erasure (its lookups find it erased all "
                     "the same): %s", type(exc).__name__)  # fmt: skip
        return 0


def _later_steps(settings: Settings, subject: CaseRef | str) -> list[_Step]:
    """The steps after the key's destruction, the same for a case and a tenant."""
    return [
        _Step("the older generations' copies of the key are destroyed",
              "the older generations' copies of the key are not yet destroyed",
              partial(_destroy_retired_keys, settings, subject)),
        _Step("the events are tombstoned", "the events are not yet tombstoned",
              partial(_tombstone_events, settings, subject)),
        _Step("the segment views are tombstoned", "the segment views are not yet tombstoned",
              partial(_tombstone_segment_views, settings, subject)),
        _Step("this host's lookup index marks its decisions erased",
              "this host's lookup index does not yet mark its decisions erased",
              partial(_mark_indexed, settings, subject)),
    ]  # fmt: skip


def erase_case(settings: Settings, case: CaseRef) -> Erasure:
    """Destroys the case's data key, then tombstones every record of the events topic that names the case.

    From the key's tombstone on, every reader treats the case as erased; compaction removes the
    events (and the key record) within the topics' erasure bound. A case never written, or erased
    already, is erased again doing nothing: all counts 0; so is a case of a tenant without topics of
    its own (tenancy by topic), which has none. Raises ErasureIncompleteError when a step fails.
    """
    if not _has_topics(settings, case.tenant):
        return Erasure(case.key, 0, 0, 0)
    first = _Step("the data key is destroyed", "the data key is not yet destroyed",
                  partial(_destroy_key, settings, case))  # fmt: skip
    keys, _, events, views, _ = _run([first, *_later_steps(settings, case)], _AGAIN)
    return Erasure(case.key, keys, events, views)


def _has_topics(settings: Settings, tenant: str) -> bool:
    """Whether the tenant's records have topics to be in: always the shared ones, with tenancy by topic its own."""
    if settings.kafka.tenancy != "topics":
        return True
    return topic_exists(settings.kafka.client_config(), topics_of(settings, tenant).keys)


def erase_tenant(settings: Settings, tenant: str) -> Erasure:
    """Destroys every key-encryption key of the tenant and tombstones each of its cases' data keys and events.

    Like erase_case: a tenant with nothing left to erase is erased doing nothing; a failed step raises
    ErasureIncompleteError.
    """
    first = _Step("the tenant's keys are destroyed", "the tenant's keys are not yet destroyed",
                  partial(_destroy_keks, settings, tenant))  # fmt: skip
    keys, _, events, views, _ = _run([first, *_later_steps(settings, tenant)], _AGAIN)
    return Erasure(tenant, keys, events, views)


def rotate_tenant_key(settings: Settings, tenant: str) -> Rotation:
    """A new key-encryption key for the tenant: every data key wrapped again, the old versions destroyed."""
    with closing(case_keys_from(settings, names=topics_of(settings, tenant))) as keys:
        return keys.rotate(tenant)
