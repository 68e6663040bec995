"""The key topic (`dpm.keys`, compacted, key `tenant/case`): wrapped data keys, and erasures (tombstone, marker)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pipeline.config.settings import Settings, SettingsError
from pipeline.core.events import CaseRef, InvalidEventError
from pipeline.kafka.cluster.layout import current_generation
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.local_stores import StoreRebuiltError
from pipeline.kafka.reading.follow import TopicFollower
from pipeline.kafka.reading.index_store import KeyStore, place
from pipeline.kafka.reading.places import PlaceReader
from pipeline.keys.provider_uri import ProviderUriError, read_tenant_uris, tenant_providers
from pipeline.keys.providers import KeyProvider, shared_layout
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, TenantCaseKeys
from pipeline.wire.headers import standard_headers
from pipeline.wire.key import KeyErased, KeyValue, decode_key_value
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.schema_ids import SchemaId

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_APP_LOG = logging.getLogger("pipeline.kafka.keytopic.keystore")


class KafkaKeyTopic:
    """Publishes key records (waiting for each call's) and reads the topic on from where it last stopped.

    `tenant` is the tenant whose own key topic this is (tenancy by topic): a record naming another
    tenant is skipped, whoever wrote it, so a tenant's principal never has a key opened as another's.
    """

    def __init__(self, client_config: dict[str, str], topic: str, tenant: str | None = None,
                 partitions: int | None = None) -> None:  # fmt: skip
        """`partitions`: the topic's partition count where the caller knows it (else asked on first use)."""
        self._topic = topic
        self._tenant = tenant
        self._config = client_config
        self._follower = TopicFollower(client_config, topic, partitions=partitions)
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()

    def publish(self, records: Sequence[tuple[CaseRef, KeyValue | None]]) -> None:
        if not records:
            return
        with self._producer_lock:  # writers publish side by side: one producer for all of them
            if self._producer is None:
                self._producer = Producer({**self._config, "enable.idempotence": True, "acks": "all"}, logger=_LOG)
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err.str())

        cases = ", ".join(case.key for case, _ in records[:3]) + (" ..." if len(records) > 3 else "")
        try:
            for case, record in records:
                value = None if record is None else record.encode()
                schema, event_id = _described(case, record)
                headers = standard_headers(schema, source="/dpm/keys", event_id=event_id, tenant=case.tenant,
                                           tombstone=record is None)  # fmt: skip
                self._producer.produce(self._topic, key=case.key.encode(), value=value,
                                       partition=case_partition(case, self._follower.partition_count()),
                                       headers=list(headers), on_delivery=delivered)  # fmt: skip
            remaining = self._producer.flush(30)
        except (KafkaException, BufferError) as exc:
            raise KafkaAdapterError(f"writing the keys of {cases} failed: {exc}") from exc
        if failures or remaining:
            raise KafkaAdapterError(f"the key records of {cases} were not all stored: {failures or remaining}")

    def sync(self, ring: KeyRing) -> None:
        for raw in self._follower.new_records():
            self._apply(ring, raw.key, raw.value)

    def load(self, ring: KeyRing, cases: Iterable[CaseRef]) -> None:
        pass  # sync applies every case

    def load_tenant(self, ring: KeyRing, tenant: str) -> None:
        pass

    def _apply(self, ring: KeyRing, key: bytes | None, value: bytes | None) -> None:
        """Applies one record whose key, value and topic name the same tenant and case; skips (and logs) any other."""
        try:
            case, record = checked_key_record(key, value, self._tenant)
        except RejectedError as exc:
            _APP_LOG.warning("key record %r of %s skipped: %s", (key or b"")[:120], self._topic, exc)
            return
        ring.apply(case, record)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        self._follower.close()


class IndexedKeyTopic(KafkaKeyTopic):
    """The key topic for a process that opens a few cases' records: each case's key read by its place, not all.

    A reader (a CLI command, an auditor's lookup) has no use for every case's key, and reading the
    topic from offset 0 grows with the number of cases ever written. The places of each case's
    latest record are kept in a file shared on the host (index_store.KeyStore), brought up to date
    by `sync` from where any process left it; a case's key is read at its place when first asked
    for (`load`), and again when `sync` finds that its record changed (rotation, erasure).
    Publishing is as KafkaKeyTopic's.
    """

    def __init__(self, client_config: dict[str, str], topic: str, directory: Path, tenant: str | None = None,
                 reader: PlaceReader | None = None) -> None:  # fmt: skip
        """`reader`: the reader of places to read key records with (its owner closes it), else one of its own."""
        reader, self._owns_reader = reader or PlaceReader(client_config), reader is None
        super().__init__(client_config, topic, tenant, partitions=reader.facts.partitions(topic))
        self._store = KeyStore(KeyStore.file(directory, topic, reader.facts.topic_id(topic)))
        self._reader = reader
        self._loaded: dict[CaseRef, int | None] = {}  # case -> the place applied to the ring (None: none found)
        self._seen = self._store.last_seq()  # changes before this point are read when a case is loaded
        self._lock = threading.Lock()

    def sync(self, ring: KeyRing) -> None:
        """Brings the places file up to the topic's ends, then applies what changed for the cases loaded.

        The ends are asked through the lookups' reader: when the file is current (the host's doors
        keep it so), nothing else is asked and the follower never connects.
        """
        with self._lock:
            ends = self._reader.ends(self._topic)
            read_to = self._store.read_to()
            # From where the file says: what other processes on the host indexed is not read again, and a file
            # started anew (damaged, set aside) is read from the topic's start, not from where this one had got.
            self._follower.start_over(read_to)
            if self._store.last_seq() < self._seen:  # a file started anew numbers its changes from 0 again
                self._seen = 0
            if any(end > read_to.get(partition, 0) for partition, end in ends.items()):
                try:
                    self._indexed(ring, ends)
                except KafkaException as exc:
                    raise KafkaAdapterError(f"indexing the key topic {self._topic} failed: {exc}") from exc
            for changed in self._store.changed_since(self._seen):
                self._seen = max(self._seen, changed.seq)
                case = _case_of(changed.case_key)
                if case is not None and case in self._loaded and self._loaded[case] != changed.place:
                    self._apply_place(ring, case, changed.place, live=changed.live)

    def _indexed(self, ring: KeyRing, ends: Mapping[int, int]) -> None:
        try:
            self._index(self._follower, ring, ends)
        except StoreRebuiltError:  # the file was damaged and started anew: index the whole topic into it
            self._follower.start_over({})
            self._seen = 0
            self._index(self._follower, ring, ends)

    def _index(self, follower: TopicFollower, ring: KeyRing, ends: Mapping[int, int]) -> None:
        """Reads the records since the file's offsets up to `ends`, applies the loaded cases', stores every place."""
        rows: list[tuple[str, int, bool]] = []
        for raw in follower.new_records(ends):
            case = _case_of((raw.key or b"").decode("utf-8", "replace"))
            if case is None or (self._tenant is not None and case.tenant != self._tenant):
                continue  # a record no reader of this topic can use: checked, and logged, if it is ever loaded
            where = place(raw.position.partition, raw.position.offset)
            # Only the place is kept: the record is checked whole when a case it names is loaded, here or later.
            rows.append((case.key, where, _is_key(raw.value)))
            if case in self._loaded:
                self._apply(ring, raw.key, raw.value)
                self._loaded[case] = where
            if len(rows) >= _KEY_CHUNK:
                self._store.apply(rows, follower.positions())
                rows = []
        self._store.apply(rows, follower.positions())

    def load(self, ring: KeyRing, cases: Iterable[CaseRef]) -> None:
        with self._lock:
            for case in cases:
                if case in self._loaded:
                    continue
                found = self._store.place_of(case.key)
                self._loaded[case] = None
                if found is not None:
                    self._apply_place(ring, case, found.place, live=found.live)

    def load_tenant(self, ring: KeyRing, tenant: str) -> None:
        self.load(ring, [c for c in (_case_of(k.case_key) for k in self._store.of_tenant(tenant)) if c is not None])

    def _apply_place(self, ring: KeyRing, case: CaseRef, where: int, *, live: bool) -> None:
        """Applies the case's record at `where` (an erasure without reading, for a record that is none)."""
        self._loaded[case] = where
        if not live:
            ring.apply(case, None)
            return
        raw = self._reader.read([(self._topic, where)]).get((self._topic, where))
        if raw is not None:  # None: compacted away, a later record stands (the next sync applies it)
            self._apply(ring, raw.key, raw.value)

    def close(self) -> None:
        super().close()
        if self._owns_reader:
            self._reader.close()
        self._store.close()


_KEY_CHUNK = 20_000  # places stored per SQLite transaction while a key topic is indexed


def _is_key(value: bytes | None) -> bool:
    """Whether a key-topic value is a wrapped key (not a tombstone, not an erased marker), by its schema alone."""
    if value is None:
        return False
    try:
        found = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(found, dict) and found.get("schema") == SchemaId.KEY.value


def _case_of(case_key: str) -> CaseRef | None:
    tenant, _, case_id = case_key.partition("/")
    try:
        return CaseRef(tenant, case_id)
    except InvalidEventError:
        return None


def _described(case: CaseRef, record: KeyValue | None) -> tuple[SchemaId, str]:
    """The schema and event id of a key topic record's headers (a tombstone: the key schema's `.tombstone` type)."""
    if record is None:
        return SchemaId.KEY, f"{case.key}/erased/{uuid.uuid4().hex}"
    if isinstance(record, KeyErased):
        return SchemaId.KEY_ERASED, f"{case.key}/erased-marker/{uuid.uuid4().hex}"
    # Unique per record: a rotation publishes the same data key again, wrapped under a new KEK.
    return SchemaId.KEY, f"{case.key}/{record.kid}/{record.kek_id}"


def checked_key_record(key: bytes | None, value: bytes | None, tenant: str | None) -> tuple[CaseRef, KeyValue | None]:
    """The case and value (a wrapped key, an erased marker, None for a tombstone) of a key-topic record.

    Raises RejectedError: SCHEMA for a key that names no case or a value that is neither a key record
    (a `kek_id` of another form than `v<N>` included) nor an erased marker, KEY_MISMATCH when key and
    value name different cases, TENANT_MISMATCH when the case is not `tenant`'s (the topic's, with
    tenancy by topic).
    """
    tenant_of_key, _, case_id = (key or b"").decode("utf-8", "replace").partition("/")
    try:
        case = CaseRef(tenant_of_key, case_id)
    except InvalidEventError as exc:
        raise RejectedError(Rejection.SCHEMA, f"a key record keyed {str(key)[:80]}: {exc}") from exc
    record = None if value is None else decode_key_value(value)
    if record is not None and record.case != case:
        raise RejectedError(Rejection.KEY_MISMATCH, f"keyed {case.key}, the value is the key of {record.case.key}")
    if tenant is not None and case.tenant != tenant:
        raise RejectedError(Rejection.TENANT_MISMATCH, f"{case.key} on the key topic of tenant {tenant!r}")
    return case, record


def kafka_case_keys(
    client_config: dict[str, str], topic: str, provider: KeyProvider, tenant: str | None = None
) -> CaseKeys:
    """The pipeline's case keys over the real key topic (`tenant`'s own, with tenancy by topic)."""
    return CaseKeys(KeyRing(provider), KafkaKeyTopic(client_config, topic, tenant))


def case_keys_from(
    settings: Settings,
    *,
    client_config: dict[str, str] | None = None,
    names: TopicNames | None = None,
    by_case: bool = False,
    reader: PlaceReader | None = None,
) -> CaseKeys:
    """The case keys the settings name (local file provider), whether or not new content is sealed.

    `client_config` and `names` override the settings' cluster and topics (a private demo cluster);
    by default the keys topic of the shared topics' current generation. `by_case`: each case's key
    is read by its place when first asked for (IndexedKeyTopic), for a process that opens a few cases,
    through `reader` when given.
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
    provider = key_provider(settings, names.prefix)
    ring = KeyRing(provider, cache_size=settings.keys.key_cache_size, cache_ttl_s=settings.keys.key_cache_ttl_s)
    if by_case:
        return CaseKeys(ring, IndexedKeyTopic(config, names.keys, settings.index_dir(), names.tenant, reader))
    return CaseKeys(ring, KafkaKeyTopic(config, names.keys, names.tenant))


def key_provider(settings: Settings, pipeline_prefix: str) -> KeyProvider:
    """The tenants' key provider the settings name (DPM_KEK_PROVIDER, DPM_KEK_PROVIDERS); SettingsError if none."""
    keys = settings.keys
    try:
        tenant_uris = read_tenant_uris(keys.kek_providers_file) if keys.kek_providers_file else {}
        return tenant_providers(keys.kek_provider, tenant_uris, local_root=settings.keys_dir(pipeline_prefix),
                                pipeline_prefix=pipeline_prefix, bind_case=keys.key_binding == "case")  # fmt: skip
    except ProviderUriError as exc:
        raise SettingsError(str(exc)) from exc


def tenant_case_keys(settings: Settings, names: TopicNames) -> TenantCaseKeys:
    """With tenancy by topic: every tenant's case keys, each from its own key topic, opened on first use."""
    return TenantCaseKeys(lambda tenant: case_keys_from(settings, names=names.of_tenant(tenant)))
