"""The key topic (`dpm.keys`, compacted, key `tenant/case`): wrapped data keys and their tombstones."""

from __future__ import annotations

import logging
import uuid

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pipeline.config.settings import Settings, SettingsError
from pipeline.core.events import CaseRef
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.follow import TopicFollower
from pipeline.kafka.layout import current_generation
from pipeline.kafka.partitioning import case_partition
from pipeline.kafka.topics import TopicNames
from pipeline.keys.providers import KeyProvider, LocalFileKeyProvider, shared_layout
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, TenantCaseKeys
from pipeline.wire.headers import standard_headers
from pipeline.wire.key import KeyRecord
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_APP_LOG = logging.getLogger("pipeline.kafka.keystore")


class KafkaKeyTopic:
    """Publishes key records (waiting for each) and reads the topic on from where it last stopped."""

    def __init__(self, client_config: dict[str, str], topic: str) -> None:
        self._topic = topic
        self._config = client_config
        self._follower = TopicFollower(client_config, topic)
        self._producer: Producer | None = None

    def publish(self, case: CaseRef, record: KeyRecord | None) -> None:
        if self._producer is None:
            self._producer = Producer({**self._config, "enable.idempotence": True, "acks": "all"}, logger=_LOG)
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err.str())

        try:
            value = None if record is None else record.encode()
            # Unique per record: a rotation publishes the same data key again, wrapped under a new KEK.
            event_id = f"{case.key}/erased/{uuid.uuid4().hex}" if record is None else (
                f"{case.key}/{record.kid}/{record.kek_id}")  # fmt: skip
            headers = standard_headers(SchemaId.KEY, source="/dpm/keys", event_id=event_id, tenant=case.tenant,
                                       tombstone=record is None)  # fmt: skip
            self._producer.produce(self._topic, key=case.key.encode(), value=value,
                                   partition=case_partition(case, self._follower.partition_count()),
                                   headers=list(headers), on_delivery=delivered)  # fmt: skip
            remaining = self._producer.flush(30)
        except (KafkaException, BufferError) as exc:
            raise KafkaAdapterError(f"writing the key of {case.key} failed: {exc}") from exc
        if failures or remaining:
            raise KafkaAdapterError(f"the key record of {case.key} was not stored: {failures or remaining}")

    def sync(self, ring: KeyRing) -> None:
        for raw in self._follower.new_records():
            self._apply(ring, raw.key, raw.value)

    @staticmethod
    def _apply(ring: KeyRing, key: bytes | None, value: bytes | None) -> None:
        tenant, _, case_id = (key or b"").decode("utf-8", "replace").partition("/")
        if not tenant or not case_id:
            _APP_LOG.warning("key record without a tenant/case key skipped: %r", key)
            return
        try:
            ring.apply(CaseRef(tenant, case_id), None if value is None else KeyRecord.decode(value))
        except RejectedError as exc:
            _APP_LOG.warning("unreadable key record for %s skipped: %s", key, exc)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        self._follower.close()


def kafka_case_keys(client_config: dict[str, str], topic: str, provider: KeyProvider) -> CaseKeys:
    """The pipeline's case keys over the real key topic."""
    return CaseKeys(KeyRing(provider), KafkaKeyTopic(client_config, topic))


def case_keys_from(
    settings: Settings, *, client_config: dict[str, str] | None = None, names: TopicNames | None = None
) -> CaseKeys:
    """The case keys the settings name (local file provider), whether or not new content is sealed.

    `client_config` and `names` override the settings' cluster and topics (a private demo cluster);
    by default the keys topic of the shared topics' current generation.
    """
    config = client_config or settings.kafka.client_config()
    prefix = names.prefix if names else settings.kafka.topic_prefix
    root = settings.keys_root()
    if shared_layout(root):
        raise SettingsError(
            f"{root} holds tenant key folders directly, shared by every pipeline; each pipeline now keeps its own "
            f"in {root}/<topic prefix>: move them into {settings.keys_dir(prefix)} (DPM_KEYS_DIR)"
        )
    names = names or current_generation(config, TopicNames(prefix))
    return kafka_case_keys(config, names.keys, LocalFileKeyProvider(settings.keys_dir(names.prefix)))


def tenant_case_keys(settings: Settings, names: TopicNames) -> TenantCaseKeys:
    """With tenancy by topic: every tenant's case keys, each from its own key topic, opened on first use."""
    return TenantCaseKeys(lambda tenant: case_keys_from(settings, names=names.of_tenant(tenant)))
