"""One idempotent producer per client for its decision requests, each send a future its delivery report completes.

A trigger is one record: a transaction would add nothing a single idempotent, acks=all write does
not give, and costs three round trips more (about 30 ms here) on the decision's critical path.
Every waiting call shares this producer, so requests asked at once travel in the same batches,
and a call holds no thread while its record is in flight: one poller thread serves the
delivery reports of all of them.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, InvalidStateError

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pipeline.core.events import LogPosition
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError
from pipeline.kafka.processing.steps import Output

_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_POLL_S = 0.05
# How long librdkafka keeps retrying a request before it reports it undelivered. A caller waits
# less (its own timeout) and is told the request may still arrive; past this, nothing more will.
DELIVERY_TIMEOUT_MS = 300_000


class TriggerSender:
    """Sends records (decision requests) and completes each one's future with its position once acknowledged."""

    def __init__(self, client_config: dict[str, str]) -> None:
        self._producer = Producer({**client_config, "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                                   "delivery.timeout.ms": DELIVERY_TIMEOUT_MS}, logger=_LOG)  # fmt: skip
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._serve, name="dpm-trigger-reports", daemon=True)
        self._poller.start()

    def send(self, output: Output) -> Future[LogPosition]:
        """Produces the record; its future completes with the position, or with KafkaAdapterError if refused."""
        future: Future[LogPosition] = Future()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            try:
                if err is None:
                    future.set_result(LogPosition(msg.partition() or 0, msg.offset() or 0))
                elif err.retriable() or err.code() == KafkaError._MSG_TIMED_OUT:
                    future.set_exception(BrokerUnavailableError(f"{output.topic}: not delivered: {err.str()}"))
                else:
                    future.set_exception(KafkaAdapterError(f"{output.topic}: refused: {err.str()}"))
            except InvalidStateError:  # the caller cancelled its future (gave up waiting): nobody to tell
                _LOG.debug("a request's delivery report came after its caller gave up")

        try:
            partition = -1 if output.partition is None else output.partition  # -1: the partitioner chooses
            self._producer.produce(output.topic, key=output.key, value=output.value, partition=partition,
                                   headers=list(output.headers), on_delivery=delivered)  # fmt: skip
        except (KafkaException, BufferError) as exc:
            raise KafkaAdapterError(f"producing to {output.topic} failed: {exc}") from exc
        return future

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(_POLL_S)
            except Exception:  # noqa: BLE001 - one report's failure must not stop every later request's
                _LOG.exception("serving the decision requests' delivery reports")

    def close(self) -> None:
        """Waits (up to 10 s) for what is in flight, then stops the poller."""
        self._producer.flush(10)
        self._stop.set()
        self._poller.join(timeout=5)
