"""Consumer lag that keeps moving while the consuming thread is busy (for example in one long model call).

The consuming thread records its positions whenever it makes progress (`track`); a probe thread
asks the brokers for the high watermarks on a consumer of its own (never joined to a group) every
few seconds and reports watermark minus position. While the consumer is stuck its positions stand
still and the lag grows as input arrives, which is what an operator's alert must see.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.kafka.cluster.admin import reader_group
from pipeline.kafka.reading.range_reads import renewed

_LOG = logging.getLogger("pipeline.kafka.processing.lag")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")


class LagProbe:
    """Calls `report(topic, {partition: lag})` for each topic read, every `interval_s`, from its own thread."""

    def __init__(
        self,
        client_config: dict[str, str],
        report: Callable[[str, Mapping[int, int]], None],
        interval_s: float = 5.0,
    ) -> None:
        # A consumer's leader metadata is refreshed as soon as a broker is lost; an AdminClient kept
        # asking the dead leader, one request timeout each time, until its metadata aged out.
        self._config = client_config
        self._consumer = self._connect()
        self._report, self._interval_s = report, interval_s
        self._positions: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-probe", daemon=True)

    def _connect(self) -> Consumer:
        return Consumer({**self._config, "group.id": reader_group("lag-probe")}, logger=_LIB_LOG)

    def track(self, positions: Mapping[tuple[str, int], int]) -> None:
        """The consumer's next offsets per assigned (topic, partition) (its whole assignment: others are dropped)."""
        with self._lock:
            self._positions = dict(positions)

    def lags(self) -> dict[str, dict[int, int]]:
        """One probe: per topic, the high watermark minus the tracked position of each tracked partition."""
        with self._lock:
            positions = dict(self._positions)
        if not positions:
            return {}
        lags: dict[str, dict[int, int]] = {}
        try:
            for (topic, partition), position in positions.items():
                tp = TopicPartition(topic, partition)
                _, high = self._consumer.get_watermark_offsets(tp, timeout=self._interval_s)
                lags.setdefault(topic, {})[partition] = max(0, high - position)
        except KafkaException as exc:  # brokers unreachable for a moment: keep the last figures
            _LOG.debug("lag unavailable: %s", exc)
            self._consumer = renewed(self._consumer, self._connect)
        return lags

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._interval_s + 15)
        if not self._thread.is_alive():
            self._consumer.close()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            for topic, lags in self.lags().items():
                self._report(topic, lags)
