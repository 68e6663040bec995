"""What the auditor's pages read through: the live index, a decision's events and audit records, replay."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.event_log import ReadResult
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.verification import ReplayReport
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames
from pipeline.services.audit_index import DecisionIndex, IndexedDecision, LiveIndex, read_audits
from pipeline.services.replay import LogChangedError, read_recorded_events, registry_backends, replay_one
from pipeline.wire.audit import AuditRecord

_LOG = logging.getLogger("pipeline.services.auditor")


@dataclass(frozen=True)
class CaseEvents:
    """A decision's recorded events as read now: the trajectory, or why there is none."""

    trajectory: Trajectory | None
    problem: str | None = None  # "erased", or what changed at the recorded offsets


class PooledLog:
    """An event log whose every read borrows one of several Kafka readers, each used by one thread at a time.

    A page holds a reader only while it reads: a replay re-running a slow model holds none.
    """

    def __init__(self, readers: list[KafkaEventLog]) -> None:
        self._all = readers
        self._free: queue.LifoQueue[KafkaEventLog] = queue.LifoQueue()
        for reader in readers:
            self._free.put(reader)

    @contextmanager
    def _borrowed(self) -> Iterator[KafkaEventLog]:
        reader = self._free.get()
        try:
            yield reader
        finally:
            self._free.put(reader)

    def read(self, positions: Sequence[LogPosition], deadline: float | None = None) -> ReadResult:
        with self._borrowed() as reader:
            return reader.read(positions, deadline)

    def scan(self, case: CaseRef, deadline: float | None = None) -> ReadResult:
        with self._borrowed() as reader:
            return reader.scan(case, deadline)

    def close(self) -> None:
        for reader in self._all:
            reader.close()


class KafkaAuditor:
    """The index, followed live from the output topics, and reads by offset for one decision at a time.

    Reads go through pools of DPM_UI_CONCURRENCY Kafka readers (one for events, one for audit
    records): that many pages read at once, and a page holds a reader only while it reads. The case keys are
    thread-safe; the index has its own lock and is refreshed by one thread. List pages read the
    index only.
    """

    def __init__(self, settings: Settings, names: TopicNames | None = None) -> None:
        config = settings.kafka.client_config()
        self.names = names or TopicNames(settings.kafka.topic_prefix)
        self._keys = case_keys_from(settings, client_config=config, names=self.names)
        self._live = LiveIndex(config, self.names, self._keys, settings.ui.max_decisions)
        count = settings.ui.concurrency
        self._events = PooledLog([KafkaEventLog(config, self.names.events) for _ in range(count)])
        self._audit_log = PooledLog([KafkaEventLog(config, self.names.audit) for _ in range(count)])
        self._backends = registry_backends(settings.model, None)
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh_failures = 0

    @property
    def index(self) -> DecisionIndex:
        return self._live.index

    def refresh(self) -> None:
        with self._refresh_lock:
            self._live.refresh()

    def start(self, interval_s: float) -> None:
        """Reads every output so far (failing loudly), then follows new ones every `interval_s`."""
        self.refresh()
        self._thread = threading.Thread(target=self._follow, args=(interval_s,), name="ui-index", daemon=True)
        self._thread.start()

    def _follow(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.refresh()
            except KafkaAdapterError as exc:
                self.refresh_failures += 1
                _LOG.warning("new outputs could not be read (next try in %.1f s): %s", interval_s, exc)

    def events(self, item: IndexedDecision) -> CaseEvents:
        try:
            trajectory = read_recorded_events(item.record, self._events, self._keys)
        except LogChangedError as exc:
            return CaseEvents(None, f"the recorded offsets now hold other records: {exc.detail}")
        return CaseEvents(trajectory, None if trajectory is not None else "erased: the case's data key is destroyed")

    def audits(self, item: IndexedDecision) -> list[AuditRecord]:
        return read_audits(item, self._audit_log, self._keys, self.names.audit)

    def replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport:
        """Re-reads the recorded offsets and re-runs the recorded backend, as `dpm replay --decision` does.

        `audits` are the decision's audit records (`audits(item)`). Raises DpmError when it cannot
        run (the broker or the model unreachable). Other pages are served meanwhile: only the read
        holds a Kafka reader, not the model calls.
        """
        return replay_one(item.record, item.view, audits, self._events, self._backends, recorded_only=False,
                          cipher=self._keys)  # fmt: skip

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._refresh_lock:
            self._live.close()
        self._events.close()
        self._audit_log.close()
        self._keys.close()
