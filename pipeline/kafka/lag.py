"""Consumer lag that keeps moving while the consuming thread is busy (for example in one long model call).

The consuming thread records its positions whenever it makes progress (`track`); a probe thread
asks the brokers for the high watermarks on its own admin client every few seconds and reports
watermark minus position. While the consumer is stuck its positions stand still and the lag grows
as input arrives, which is what an operator's alert must see.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from pipeline.kafka.admin import admin_client

_LOG = logging.getLogger("pipeline.kafka.lag")


class LagProbe:
    """Reports `{partition: lag}` of one topic to `report` every `interval_s`, from its own thread."""

    def __init__(
        self,
        client_config: dict[str, str],
        topic: str,
        report: Callable[[Mapping[int, int]], None],
        interval_s: float = 5.0,
    ) -> None:
        self._admin = admin_client(client_config)
        self._topic, self._report, self._interval_s = topic, report, interval_s
        self._positions: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lag-probe-{topic}", daemon=True)

    def track(self, positions: Mapping[int, int]) -> None:
        """The consumer's next offsets per assigned partition (its whole assignment: others are dropped)."""
        with self._lock:
            self._positions = dict(positions)

    def lags(self) -> dict[int, int]:
        """One probe: the high watermark minus the tracked position of each tracked partition."""
        with self._lock:
            positions = dict(self._positions)
        if not positions:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # untyped in confluent-kafka
        wanted = {TopicPartition(self._topic, p): latest for p in positions}
        lags: dict[int, int] = {}
        try:
            for tp, future in self._admin.list_offsets(wanted, request_timeout=self._interval_s).items():
                lags[tp.partition] = max(0, future.result().offset - positions[tp.partition])
        except KafkaException as exc:  # brokers unreachable for a moment: keep the last figures
            _LOG.debug("lag unavailable: %s", exc)
        return lags

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._interval_s + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            lags = self.lags()
            if lags:
                self._report(lags)
