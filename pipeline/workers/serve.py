"""Wires the projection worker: settings -> event log reader, backend, handler, transactional loop."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from pipeline.kafka.eos import LoopConfig, TransactionalLoop
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames
from pipeline.llm.factory import BackendSettings, make_backend
from pipeline.settings import Settings
from pipeline.workers.projection import ProjectionHandler

_LOG = logging.getLogger("pipeline.workers")


@dataclass(frozen=True)
class WorkerOptions:
    worker_id: str
    group_id: str = "dpm-projection"
    batch_size: int = 8
    session_timeout_ms: int = int(os.environ.get("DPM_SESSION_TIMEOUT_MS", "10000"))
    transaction_timeout_ms: int = int(os.environ.get("DPM_TRANSACTION_TIMEOUT_MS", "60000"))


def build_projection_worker(
    settings: Settings, backend_settings: BackendSettings, options: WorkerOptions
) -> tuple[TransactionalLoop, ProjectionHandler, KafkaEventLog]:
    """The worker's loop and handler, connected but not started."""
    names = TopicNames(settings.topic_prefix)
    log = KafkaEventLog(settings.client_config(), names.events)
    handler = ProjectionHandler(names, log, make_backend(backend_settings), options.worker_id)
    config = LoopConfig(
        group_id=options.group_id,
        input_topic=names.triggers,
        transactional_id=f"{options.group_id}-{options.worker_id}",
        batch_size=options.batch_size,
        session_timeout_ms=options.session_timeout_ms,
        transaction_timeout_ms=options.transaction_timeout_ms,
    )
    return TransactionalLoop(settings.client_config(), config, handler), handler, log


def serve_projection(
    settings: Settings, backend_settings: BackendSettings, options: WorkerOptions, stop: threading.Event
) -> None:
    """Runs the projection worker until `stop` is set."""
    loop, _, log = build_projection_worker(settings, backend_settings, options)
    _LOG.info("projection worker %s joined %s on %s", options.worker_id, options.group_id, settings.bootstrap_servers)
    try:
        loop.run(stop.is_set)
    finally:
        log.close()
