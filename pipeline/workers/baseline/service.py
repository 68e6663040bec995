"""Wires the Summ-only baseline: settings -> connection, backend, metrics, the faust app, and runs it."""

from __future__ import annotations

from dataclasses import dataclass

import faust

from pipeline.config.settings import Settings
from pipeline.core.run import SummVariant
from pipeline.kafka.admin import topic_partitions
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.topics import TopicNames
from pipeline.llm.registry import make_backend
from pipeline.observability.logs import json_logging_config
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.trigger import TriggerLimits
from pipeline.workers.baseline.app import Baseline, BaselineOptions
from pipeline.workers.baseline.connection import faust_connection


@dataclass(frozen=True)
class BaselineChoices:
    """What the command line chooses for one baseline member (the rest comes from the settings)."""

    worker_id: str
    budgets: tuple[int, ...]
    default_domain: str = "loan"
    variant: SummVariant = SummVariant.REWRITE
    trigger_wait_s: float = 60.0


def build_baseline(settings: Settings, choices: BaselineChoices, metrics: PipelineMetrics | None = None) -> Baseline:
    """The baseline's faust app, configured but not started."""
    names = TopicNames(settings.kafka.topic_prefix)
    options = BaselineOptions(
        worker_id=choices.worker_id,
        partitions=topic_partitions(settings.kafka.client_config(), names.events),
        datadir=settings.paths.home / "baseline" / choices.worker_id,
        app_id=f"{settings.kafka.topic_prefix}-baseline",
        budgets=choices.budgets,
        default_domain=choices.default_domain,
        variant=choices.variant,
        trigger_wait_s=choices.trigger_wait_s,
        limits=TriggerLimits.of(settings.worker.max_trigger_positions, settings.worker.domains),
        concurrency=settings.model.concurrency,
    )
    options.datadir.mkdir(parents=True, exist_ok=True)
    return Baseline(options, names, make_backend(settings.model), faust_connection(settings.kafka), metrics,
                    cipher=case_keys_from(settings), seal=settings.keys.encryption)  # fmt: skip


def serve_baseline(settings: Settings, choices: BaselineChoices) -> None:
    """Runs one baseline member (and its /metrics endpoint) until it is signalled to stop."""
    metrics = PipelineMetrics(settings.metrics.tenants)
    if settings.metrics.port >= 0:
        metrics.serve(settings.metrics.port, settings.metrics.addr)
    app = build_baseline(settings, choices, metrics).app
    faust.Worker(app, loglevel="INFO", quiet=True, logging_config=json_logging_config()).execute_from_commandline()
