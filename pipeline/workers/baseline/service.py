"""Wires the Summ-only baseline: settings -> connection, backend, metrics, its topics, the faust app, and runs it."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import faust

from pipeline.config.settings import Settings
from pipeline.core.run import SummVariant
from pipeline.kafka.admin import admin_client, topic_partitions, topic_replication
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.steps import max_record_bytes
from pipeline.kafka.topics import BaselineTopics, ErasureBound, TopicNames, ensure_topics
from pipeline.llm.registry import make_backend
from pipeline.llm.windows import context_window
from pipeline.observability.logs import json_logging_config
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.trigger import TriggerLimits
from pipeline.workers.baseline.app import Baseline, BaselineOptions
from pipeline.workers.baseline.connection import faust_connection

_LOG = logging.getLogger("pipeline.workers.baseline")


@dataclass(frozen=True)
class BaselineChoices:
    """What the command line chooses for one baseline member (the rest comes from the settings)."""

    worker_id: str
    budgets: tuple[int, ...]
    default_domain: str = "loan"
    variant: SummVariant = SummVariant.REWRITE
    trigger_wait_s: float = 60.0


def ensure_baseline_topics(settings: Settings, app_id: str, partitions: int) -> None:
    """Creates (or checks) the baseline's own topics, as many partitions as the events, as replicated."""
    config = settings.kafka.client_config()
    names = TopicNames(settings.kafka.topic_prefix)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    ensure_topics(admin_client(config), BaselineTopics(app_id).specs(partitions, bound),
                  topic_replication(config, names.events))  # fmt: skip


def build_baseline(settings: Settings, choices: BaselineChoices, metrics: PipelineMetrics | None = None) -> Baseline:
    """The baseline's faust app, configured but not started; its topics exist once this returns."""
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    options = BaselineOptions(
        worker_id=choices.worker_id,
        partitions=topic_partitions(config, names.events),
        datadir=settings.paths.home / "baseline" / choices.worker_id,
        app_id=f"{settings.kafka.topic_prefix}-baseline",
        budgets=choices.budgets,
        default_domain=choices.default_domain,
        variant=choices.variant,
        trigger_wait_s=choices.trigger_wait_s,
        limits=TriggerLimits.of(settings.worker.max_trigger_positions, settings.worker.domains),
        concurrency=settings.model.concurrency,
        max_record_bytes=max_record_bytes(config),
    )
    ensure_baseline_topics(settings, options.app_id, options.partitions)
    options.datadir.mkdir(parents=True, exist_ok=True)
    backend = make_backend(settings.model)
    return Baseline(options, names, backend, faust_connection(settings.kafka), config, metrics=metrics,
                    cipher=case_keys_from(settings), seal=settings.keys.encryption,
                    window=context_window(settings.model, backend))  # fmt: skip


class _DrainedWorker(faust.Worker):
    """faust's worker, which exits the process once stopping has taken longer than the drain deadline."""

    def __init__(self, *apps: Any, drain_s: float, **kwargs: Any) -> None:  # noqa: ANN401 - faust's signature
        super().__init__(*apps, **kwargs)
        self._drain_s = drain_s

    def _schedule_shutdown(self, signum: Any) -> None:  # noqa: ANN401 - mode's signature
        threading.Thread(target=self._exit_after_drain, name="drain-deadline", daemon=True).start()
        super()._schedule_shutdown(signum)

    def _exit_after_drain(self) -> None:
        threading.Event().wait(self._drain_s)
        _LOG.error("the baseline did not stop within the drain deadline of %g s; exiting without it", self._drain_s)
        logging.shutdown()
        os._exit(0)


def serve_baseline(settings: Settings, choices: BaselineChoices) -> None:
    """Runs one baseline member (and its /metrics endpoint) until it is signalled to stop."""
    metrics = PipelineMetrics(settings.metrics.tenants)
    if settings.metrics.port >= 0:
        metrics.serve(settings.metrics.port, settings.metrics.addr)
    app = build_baseline(settings, choices, metrics).app
    _DrainedWorker(app, drain_s=settings.worker.drain_s, loglevel="INFO", quiet=True,
                   logging_config=json_logging_config()).execute_from_commandline()  # fmt: skip
