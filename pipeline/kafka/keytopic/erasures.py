"""Which of a tenant's cases were erased, as the key topic tells: followed on a thread, so a check never waits.

Erasing a case destroys its data key: on the compacted key topic, a tombstone and then an erased
marker (wire/key.py). A process that keeps anything of a case (a client's typed decisions,
replies, recent events, idempotency records) must drop it when the erasure comes, whichever
process erased it, and must refuse the case from then on. This watch reads the key topic from its
start once, then every `interval_s` what was written since, and calls `on_erased(case)` for each
of the tenant's tombstones and markers.

Bounds: the marker is the erased case's latest record on the key topic, which compaction keeps for
good (the tombstone goes `delete.retention.ms` after compaction reached it, DPM_TOMBSTONE_RETENTION_MS;
the marker never), so a process started at any time learns every erasure at its first reading. It
remembers the last ERASED_CASES (100,000) erased cases it read, the key ring's own bound: a process
that read more erasures than that since it started takes the oldest for cases it never knew (the
key ring, which refuses a new key for a case it remembers erased, has the same bound). Another
process's erasure reaches this one within `interval_s` (INTERVAL_S, 1 s) and a read of the topic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cachetools import LRUCache

from pipeline.core.events import CaseRef
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.keytopic.keystore import checked_key_record
from pipeline.kafka.reading.follow import TopicFollower
from pipeline.keys.ring import ERASED_CASES
from pipeline.wire.key import KeyErased
from pipeline.wire.rejection import RejectedError

_LOG = logging.getLogger("pipeline.kafka.keytopic.erasures")
INTERVAL_S = 1.0  # how soon another process's erasure reaches this one's caches


class ErasureWatch:
    """The tenant's erased cases, from the key topic's tombstones and erased markers.

    A case keyed again after its erasure (by a release that did not refuse it) is live again.
    """

    def __init__(self, client_config: dict[str, str], topic: str, tenant: str,
                 on_erased: Callable[[CaseRef], None], interval_s: float = INTERVAL_S) -> None:  # fmt: skip
        self._config, self._topic, self._tenant = client_config, topic, tenant
        self._on_erased, self._interval_s = on_erased, interval_s
        self._erased: LRUCache[CaseRef, None] = LRUCache(maxsize=ERASED_CASES)
        self._lock = threading.Lock()
        self._read_once = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()

    def erased(self, case: CaseRef, timeout_s: float) -> bool:
        """Whether the case was erased; the first call waits up to `timeout_s` for the topic's first reading.

        BrokerUnavailableError when that reading is not done in time (nothing can be said yet).
        """
        self._start()
        if not self._read_once.wait(timeout_s):
            raise BrokerUnavailableError(f"reading the key topic {self._topic} (which cases are erased) did not end "
                                         f"within {timeout_s:g} s")  # fmt: skip
        with self._lock:
            return case in self._erased

    @property
    def ready(self) -> bool:
        """Whether the key topic was read once (a check answers without waiting); starts the watch."""
        self._start()
        return self._read_once.is_set()

    def note(self, case: CaseRef) -> None:
        """Marks a case erased now (this process erased it): its caches go before the erasure is read back."""
        with self._lock:
            self._erased[case] = None
        self._on_erased(case)

    def _start(self) -> None:
        with self._started:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"dpm-erasures-{self._tenant}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        follower: TopicFollower | None = None
        while not self._stop.is_set():
            try:
                follower = follower or TopicFollower(self._config, self._topic)
                self._read(follower)
                self._read_once.set()
            except (KafkaAdapterError, OSError) as exc:  # the cluster away: asked again at the next turn
                _LOG.warning("reading the key topic %s for erasures failed: %s", self._topic, exc)
            except Exception:  # noqa: BLE001 - a bug must not end the watch silently: logged, and it goes on
                _LOG.exception("following the key topic %s for erasures failed", self._topic)
            self._stop.wait(self._interval_s)
        if follower is not None:
            follower.close()

    def _read(self, follower: TopicFollower) -> None:
        for record in follower.new_records():
            tenant, _, _ = (record.key or b"").partition(b"/")
            if tenant != self._tenant.encode():
                continue  # another tenant's, on the shared key topic: not read further
            try:
                case, value = checked_key_record(record.key, record.value, self._tenant)
            except RejectedError as exc:
                _LOG.warning("a key record on %s skipped: %s", self._topic, exc)
                continue
            if value is None or isinstance(value, KeyErased):
                self.note(case)
            else:
                with self._lock:
                    self._erased.pop(case, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
