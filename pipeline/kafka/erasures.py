"""Which of a tenant's cases were erased, as the key topic tells: followed on a thread, so a check never waits.

Erasing a case destroys its data key: a tombstone on the compacted key topic. A process that keeps
anything of a case (a client's typed decisions, replies, recent events, idempotency records) must
drop it when that tombstone comes, whichever process erased it, and must refuse the case from then
on. This watch reads the key topic from its start once, then every `interval_s` what was written
since, and calls `on_erased(case)` for each of the tenant's tombstones.

Bounds: the last ERASED_CASES erased cases are remembered per process (the key ring's own bound),
and a tombstone is in the topic for `delete.retention.ms` after compaction reached it
(DPM_TOMBSTONE_RETENTION_MS): a process started after both have passed no longer knows the case.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cachetools import LRUCache

from pipeline.core.events import CaseRef, InvalidEventError
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.follow import TopicFollower
from pipeline.keys.ring import ERASED_CASES

_LOG = logging.getLogger("pipeline.kafka.erasures")
INTERVAL_S = 1.0  # how soon another process's erasure reaches this one's caches


class ErasureWatch:
    """The tenant's erased cases, from the key topic's tombstones (a case keyed again afterwards is live again)."""

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
        """Marks a case erased now (this process erased it): its caches go before the tombstone is read back."""
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
            tenant, _, case_id = (record.key or b"").decode("utf-8", "replace").partition("/")
            if tenant != self._tenant:
                continue
            try:
                case = CaseRef(tenant, case_id)
            except InvalidEventError:
                continue  # not a case's key record: the key store skips and logs it
            if record.value is None:
                self.note(case)
            else:
                with self._lock:
                    self._erased.pop(case, None)  # written again after its erasure: a new key, a live case

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
