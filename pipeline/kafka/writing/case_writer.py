"""A client's writes: a case's events through its partition's sequencer, its decision requests through one producer.

Appends go to the sequencer of the case's events partition (kafka/writing/sequencer.py), which a
process keeps one of per partition it writes to, shared by every client of the process on the same
cluster and topics (an HTTP door serving many tenants on the shared topics numbers each partition
once, not once per tenant). Their heads are kept in a store under DPM_HOME
(kafka/writing/head_store.py), shared by the processes of a host.

Decision requests are not events: a case's triggers go through one idempotent producer the
process's clients share each (kafka/writing/trigger_sender.py), listing the case's events as
committed when asked.

Producers outside this library (`dpm produce`, another language's client) are not sequenced: a
case must be written through one or the other.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import ClassVar

from pipeline.core.events import CaseRef, LogPosition
from pipeline.kafka.cluster.admin import topic_id, topic_partitions
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.processing.steps import Output
from pipeline.kafka.writing.head_store import HeadStore, heads_file
from pipeline.kafka.writing.sequencer import (
    SOURCE,
    Appended,
    GroupCommit,
    KnownCase,
    PartitionSequencer,
    SequencerStats,
)
from pipeline.kafka.writing.trigger_sender import TriggerSender
from pipeline.wire.event import CaseOpening
from pipeline.wire.headers import standard_headers
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import DecisionRequest

READ_TIMEOUT_S = 10.0  # how long learning a case's head may take (a fold of what its partition gained)


class _Shared:
    """A process's sequencers and head stores, each shared by every client using the same cluster and topics."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _stores: ClassVar[dict[Path, tuple[HeadStore, int]]] = {}
    _sequencers: ClassVar[dict[tuple[object, ...], tuple[PartitionSequencer, int]]] = {}

    @classmethod
    def store(cls, path: Path) -> HeadStore:
        with cls._lock:
            store, users = cls._stores.get(path) or (HeadStore(path), 0)
            cls._stores[path] = (store, users + 1)
            return store

    @classmethod
    def release_store(cls, store: HeadStore) -> None:
        with cls._lock:
            _, users = cls._stores[store.path]
            if users > 1:
                cls._stores[store.path] = (store, users - 1)
                return
            del cls._stores[store.path]
        store.close()

    @classmethod
    def sequencer(cls, config: dict[str, str], names: TopicNames, partition: int, store: HeadStore,
                  commit: GroupCommit) -> tuple[tuple[object, ...], PartitionSequencer]:  # fmt: skip
        key = (tuple(sorted(config.items())), store.path, names.events, partition)
        with cls._lock:
            sequencer, users = cls._sequencers.get(key) or (PartitionSequencer(config, names, partition, store,
                                                                               commit), 0)  # fmt: skip
            cls._sequencers[key] = (sequencer, users + 1)
            return key, sequencer

    @classmethod
    def release_sequencer(cls, key: tuple[object, ...]) -> None:
        with cls._lock:
            sequencer, users = cls._sequencers[key]
            if users > 1:
                cls._sequencers[key] = (sequencer, users - 1)
                return
            del cls._sequencers[key]
        sequencer.close()


class CaseWriters:
    """A client's way to the sequencers of its topics' partitions, and its producer of decision requests.

    Thread-safe. `state_dir` holds the head store (one file per cluster and events topic).
    """

    def __init__(self, client_config: dict[str, str], names: TopicNames, cipher: CaseCipher | None,
                 state_dir: Path, commit: GroupCommit | None = None) -> None:  # fmt: skip
        self._config, self._names, self._cipher, self._state_dir = client_config, names, cipher, state_dir
        self._commit = commit or GroupCommit()
        self._store: HeadStore | None = None
        self._partitions: dict[str, int] | None = None  # asked of the cluster at the first use, not at every case
        self._held: dict[int, tuple[tuple[object, ...], PartitionSequencer]] = {}
        self._sender: TriggerSender | None = None
        self._lock = threading.Lock()

    def _partition_counts(self) -> dict[str, int]:
        if self._partitions is None:
            self._partitions = {t: topic_partitions(self._config, t) for t in (self._names.events,
                                                                               self._names.triggers)}  # fmt: skip
        return self._partitions

    def partition_of(self, case: CaseRef) -> tuple[str, int]:
        """The events topic and partition of the case (the doors route its appends to the partition's owner)."""
        with self._lock:
            return self._names.events, case_partition(case, self._partition_counts()[self._names.events])

    def known_partition_of(self, case: CaseRef) -> tuple[str, int] | None:
        """partition_of without waiting: None until the topics' partition counts have been read once."""
        counts = self._partitions  # read once: set whole, never changed in place
        return None if counts is None else (self._names.events, case_partition(case, counts[self._names.events]))

    def running(self, case: CaseRef) -> bool:
        """Whether the case's partition has its sequencer already: queueing for it then waits on nothing."""
        return self._running(case) is not None

    def _running(self, case: CaseRef) -> PartitionSequencer | None:
        # Without the lock, which a first use of another partition holds while it asks the cluster
        known = self.known_partition_of(case)
        held = None if known is None else self._held.get(known[1])  # each entry set whole, never changed in place
        return None if held is None else held[1]

    def _sequencer(self, case: CaseRef) -> PartitionSequencer:
        running = self._running(case)
        if running is not None:
            return running
        with self._lock:
            partition = case_partition(case, self._partition_counts()[self._names.events])
            held = self._held.get(partition)
            if held is None:
                held = self._held[partition] = _Shared.sequencer(self._config, self._names, partition,
                                                                 self._head_store(), self._commit)  # fmt: skip
            return held[1]

    def _head_store(self) -> HeadStore:
        if self._store is None:
            events = self._names.events
            # One file per topic incarnation (its id): another cluster's topic of the same name, or the topic
            # made again, has a file of its own, never rows folded from another log.
            identity = topic_id(self._config, events)
            store = _Shared.store(heads_file(self._state_dir / "heads", events, identity))
            store.adopt(events, identity, related=(self._names.triggers,))
            self._store = store
        return self._store

    def append(self, case: CaseRef, items: list[tuple[str, str]], *, batch_id: str, fingerprint: str | None,
               opening: CaseOpening | None = None, expected_seq: int | None = None,
               timeout_s: float = 60.0) -> Appended:  # fmt: skip
        """Appends (kind, text) events after the case's last, all or none; see PartitionSequencer.append."""
        return self._sequencer(case).append(case, items, batch_id=batch_id, fingerprint=fingerprint, opening=opening,
                                            expected_seq=expected_seq, cipher=self._cipher,
                                            timeout_s=timeout_s)  # fmt: skip

    def append_soon(self, case: CaseRef, items: list[tuple[str, str]], *, batch_id: str, fingerprint: str | None,
                    expected_seq: int | None = None, timeout_s: float = 60.0) -> Future[Appended]:  # fmt: skip
        """`append` as a future (an asyncio caller waits for it without a thread)."""
        return self._sequencer(case).append_soon(case, items, batch_id=batch_id, fingerprint=fingerprint,
                                                 opening=None, expected_seq=expected_seq, cipher=self._cipher,
                                                 timeout_s=timeout_s)  # fmt: skip

    def known(self, case: CaseRef, timeout_s: float = READ_TIMEOUT_S, *, requests: bool = True) -> KnownCase:
        """The case's events and decision requests as committed now (nothing registered, nobody fenced)."""
        return self._sequencer(case).known(case, timeout_s, requests=requests)

    def known_soon(self, case: CaseRef, timeout_s: float = READ_TIMEOUT_S, *,
                   requests: bool = True) -> Future[KnownCase]:  # fmt: skip
        """`known` as a future (an asyncio caller waits for it without a thread); see PartitionSequencer.known."""
        return self._sequencer(case).known_soon(case, timeout_s, requests=requests)

    def forget(self, case: CaseRef) -> None:
        """Drops the case's head (it was erased): its next append starts again at seq 1 under a new key."""
        with self._lock:
            store = self._head_store()
        store.forget(self._names.events, case.key)
        store.forget(self._names.triggers, case.key)

    def stats(self) -> SequencerStats:
        """What the sequencers this client uses have done (shared with the process's other clients of its topics)."""
        with self._lock:
            held = [sequencer.stats for _, sequencer in self._held.values()]
        return SequencerStats(sum(s.transactions for s in held), sum(s.appends for s in held),
                              sum(s.events_read for s in held))  # fmt: skip

    def send_trigger(self, request: DecisionRequest) -> Future[LogPosition]:
        """Sends a decision request on the case's partition of the triggers topic; its future completes when acked."""
        topic = self._names.triggers
        headers = standard_headers(SchemaId.TRIGGER, source=SOURCE, event_id=request.trigger_id,
                                   tenant=request.case.tenant)  # fmt: skip
        with self._lock:
            output = Output(topic, request.case.key.encode(), request.encode(), headers,
                            case_partition(request.case, self._partition_counts()[topic]))  # fmt: skip
            if self._sender is None:
                self._sender = TriggerSender(self._config)
            sender = self._sender
        return sender.send(output)

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
            sender, self._sender = self._sender, None
            store, self._store = self._store, None
        for key, _ in held.values():
            _Shared.release_sequencer(key)
        if sender is not None:
            sender.close()
        if store is not None:
            _Shared.release_store(store)
