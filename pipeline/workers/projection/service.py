"""Wires the projection worker: settings -> event log reader, backend, metrics, handler, transactional loop."""

from __future__ import annotations

import logging
import threading
from contextlib import ExitStack
from dataclasses import dataclass

from pipeline.config.settings import WORKER_METRICS_PORT, Settings
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.layout import LayoutError, LayoutWatch, pipeline_names
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.processing.lag import LagProbe
from pipeline.kafka.processing.segment_views import SegmentViews
from pipeline.kafka.processing.transactions import LoopConfig, TransactionalLoop
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.llm.registry import make_backend
from pipeline.llm.windows import context_window
from pipeline.observability.metrics import Liveness, PipelineMetrics
from pipeline.observability.tracing import tracing_from
from pipeline.wire.trigger import TriggerLimits
from pipeline.workers.lifecycle import run_until_stopped
from pipeline.workers.projection.handler import CaseTopics, ProjectionHandler
from pipeline.workers.projection.tenants import Opened, TenantTopics
from pipeline.workers.publishing import worker_source

_LOG = logging.getLogger("pipeline.workers")


@dataclass(frozen=True)
class WorkerOptions:
    """A projection worker's identity, group and batch size (the rest comes from the settings)."""

    worker_id: str
    group_id: str | None = None  # None: <topic prefix>-projection, so workers of other topics never share it
    batch_size: int = 8

    def group(self, settings: Settings) -> str:
        return self.group_id or f"{settings.kafka.topic_prefix}-projection"


def build_projection_worker(
    settings: Settings, options: WorkerOptions, metrics: PipelineMetrics | None = None, names: TopicNames | None = None
) -> tuple[TransactionalLoop, ExitStack]:
    """The worker's loop, connected but not started, and what to close afterwards (event log, key topic).

    `names`: the topics to use (default: the current generation of the settings' prefix, its counts checked).
    """
    settings.worker.check_timing(settings.model)
    names = names or pipeline_names(settings)
    client = settings.kafka.client_config()
    source = worker_source(Architecture.DPM, options.worker_id)
    resources = ExitStack()
    by_topic = settings.kafka.tenancy == "topics"
    if by_topic:  # every tenant's own triggers topic; a tenant's readers are opened on its first trigger
        tenant_topics = TenantTopics(lambda tenant: _open_topics(settings, names.of_tenant(tenant), source))
        resources.callback(tenant_topics.close)
        shared = CaseTopics(names, InMemoryEventLog(partitions=0))  # never read: topics_of refuses a shared topic
    else:
        shared, close = _open_topics(settings, names, source)
        resources.callback(close)
    limits = TriggerLimits.of(settings.worker.max_trigger_positions, settings.worker.domains)
    tracing = tracing_from(settings.tracing.mode, settings.tracing.otlp_endpoint, service="dpm-worker")
    resources.callback(tracing.shutdown)  # exports the spans still buffered
    backend = make_backend(settings.model)
    handler = ProjectionHandler(names, shared.log, tracing.traced(backend), options.worker_id,
                                max_trajectory_chars=settings.worker.max_case_chars, metrics=metrics, limits=limits,
                                read_deadline_s=settings.worker.trigger_deadline_s, cipher=shared.cipher,
                                seal=settings.keys.encryption, tracing=tracing,
                                window=context_window(settings.model, backend),
                                layout=settings.model.prompt_layout,
                                segment_views=shared.segment_views,
                                tenant_topics=tenant_topics if by_topic else None,
                                key_service_wait_s=settings.worker.key_service_wait_s)  # fmt: skip
    group = options.group(settings)
    config = LoopConfig(
        group_id=group,
        input_topic=names.tenant_triggers_pattern() if by_topic else names.triggers,
        transactional_id=f"{group}-{options.worker_id}",
        batch_size=options.batch_size,
        session_timeout_ms=settings.worker.session_timeout_ms,
        transaction_timeout_ms=settings.worker.transaction_timeout_ms,
        max_poll_interval_ms=settings.worker.max_poll_interval_ms,
        batch_time_s=settings.worker.batch_time_s(),
        concurrency=settings.model.concurrency,
        group_protocol=settings.kafka.group_protocol,
        key_service_wait_s=settings.worker.key_service_wait_s,
    )
    return TransactionalLoop(client, config, handler), resources


def _open_topics(settings: Settings, names: TopicNames, source: str) -> Opened:
    """The readers of one set of topics (the shared ones, or a tenant's own), and what closes them."""
    client = settings.kafka.client_config()
    opened = ExitStack()
    log = KafkaEventLog(client, names.events)
    opened.callback(log.close)
    keys = case_keys_from(settings, names=names)
    opened.callback(keys.close)
    views = SegmentViews(client, names.segments, keys, seal=settings.keys.encryption, source=source)
    opened.callback(views.close)
    return CaseTopics(names, log, keys, views), opened.close


def serve_projection(settings: Settings, options: WorkerOptions, stop: threading.Event) -> None:
    """Runs the projection worker (and its /metrics and /healthz endpoint) until `stop` is set."""
    metrics = PipelineMetrics(settings.metrics.tenants)
    liveness = Liveness(settings.worker.health_stall_s)
    names = pipeline_names(settings)
    loop, resources = build_projection_worker(settings, options, metrics, names)
    layout_changed: list[str] = []  # why the watch stopped the worker, if it did

    def follow_layout(reason: str) -> None:
        layout_changed.append(reason)
        stop.set()

    watch = LayoutWatch(settings.kafka.client_config(), names, follow_layout)
    port = settings.metrics.port_or(WORKER_METRICS_PORT)
    server = metrics.serve(port, settings.metrics.addr, health=liveness.check) if port >= 0 else None
    group = options.group(settings)
    # The lag gauge is reported from the probe's thread, so it keeps moving during a long model call.
    probe = LagProbe(settings.kafka.client_config(), lambda topic, lags: metrics.observe_lag(group, topic, lags))

    def progressed() -> None:  # on the loop's thread, after every record and every turn
        liveness.turned()
        probe.track(loop.positions())

    _LOG.info("projection worker %s joined %s on %s", options.worker_id, group, settings.kafka.bootstrap_servers,
              extra={"worker_id": options.worker_id})  # fmt: skip
    probe.start()
    if settings.kafka.tenancy != "topics":
        watch.start()
    try:
        run_until_stopped(lambda: loop.run(stop.is_set, on_progress=progressed), stop, settings.worker.drain_s,
                          name="projection-loop")  # fmt: skip
    finally:
        watch.stop()
        probe.stop()
        resources.close()
        if server is not None:
            server.shutdown()
    if layout_changed:
        raise LayoutError(f"stopped: {layout_changed[0]}")
