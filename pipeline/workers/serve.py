"""Wires the projection worker: settings -> event log reader, backend, metrics, handler, transactional loop."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from pipeline.kafka.eos import LoopConfig, TransactionalLoop
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames
from pipeline.llm.factory import BackendSettings, make_backend
from pipeline.observability.metrics import PipelineMetrics
from pipeline.settings import Settings
from pipeline.workers.projection import ProjectionHandler

_LOG = logging.getLogger("pipeline.workers")


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


@dataclass(frozen=True)
class WorkerOptions:
    """A projection worker's identity, group and tuning; metrics_port < 0 disables the metrics server."""

    worker_id: str
    group_id: str = "dpm-projection"
    batch_size: int = 8
    session_timeout_ms: int = field(default_factory=lambda: _env_int("DPM_SESSION_TIMEOUT_MS", 10_000))
    transaction_timeout_ms: int = field(default_factory=lambda: _env_int("DPM_TRANSACTION_TIMEOUT_MS", 60_000))
    metrics_port: int = field(default_factory=lambda: _env_int("DPM_METRICS_PORT", 9400))
    metrics_addr: str = field(default_factory=lambda: os.environ.get("DPM_METRICS_ADDR", "0.0.0.0"))  # noqa: S104
    metric_tenants: tuple[str, ...] = field(
        default_factory=lambda: tuple(t for t in os.environ.get("DPM_METRICS_TENANTS", "").split(",") if t)
    )


def build_projection_worker(
    settings: Settings,
    backend_settings: BackendSettings,
    options: WorkerOptions,
    metrics: PipelineMetrics | None = None,
) -> tuple[TransactionalLoop, KafkaEventLog]:
    """The worker's loop, connected but not started, and its event-log reader (to close afterwards)."""
    names = TopicNames(settings.topic_prefix)
    log = KafkaEventLog(settings.client_config(), names.events)
    handler = ProjectionHandler(names, log, make_backend(backend_settings), options.worker_id, metrics=metrics)
    config = LoopConfig(
        group_id=options.group_id,
        input_topic=names.triggers,
        transactional_id=f"{options.group_id}-{options.worker_id}",
        batch_size=options.batch_size,
        session_timeout_ms=options.session_timeout_ms,
        transaction_timeout_ms=options.transaction_timeout_ms,
    )
    return TransactionalLoop(settings.client_config(), config, handler), log


def serve_projection(
    settings: Settings, backend_settings: BackendSettings, options: WorkerOptions, stop: threading.Event
) -> None:
    """Runs the projection worker (and its /metrics endpoint) until `stop` is set."""
    metrics = PipelineMetrics(options.metric_tenants)
    server = metrics.serve(options.metrics_port, options.metrics_addr) if options.metrics_port >= 0 else None
    loop, log = build_projection_worker(settings, backend_settings, options, metrics)
    topic = TopicNames(settings.topic_prefix).triggers
    _LOG.info("projection worker %s joined %s on %s", options.worker_id, options.group_id, settings.bootstrap_servers,
              extra={"worker_id": options.worker_id})  # fmt: skip
    try:
        loop.run(stop.is_set, on_idle=lambda: metrics.observe_lag(options.group_id, topic, loop.lag()))
    finally:
        log.close()
        if server is not None:
            server.shutdown()
