"""Wires the Summ-only baseline: settings -> connection, backend, metrics, its topics, the faust app, and runs it."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import faust

from pipeline.config.settings import BASELINE_METRICS_PORT, Settings
from pipeline.core.errors import DpmError
from pipeline.core.run import SummVariant
from pipeline.kafka.cluster.admin import admin_client, topic_partitions, topic_replication
from pipeline.kafka.cluster.layout import LayoutWatch, pipeline_names
from pipeline.kafka.cluster.topics import BaselineTopics, ErasureBound, ensure_topics, partition_counts
from pipeline.kafka.keytopic.keystore import case_keys_from, tenant_case_keys
from pipeline.kafka.processing.steps import max_record_bytes
from pipeline.llm.registry import make_backend
from pipeline.llm.windows import context_window
from pipeline.observability.logs import dump_stacks_on_sigusr1, json_logging_config
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.trigger import TriggerLimits
from pipeline.workers.baseline.app import Baseline, BaselineOptions
from pipeline.workers.baseline.connection import faust_connection
from pipeline.workers.baseline.tenancy import REFRESH_S, BaselineInputs

_LOG = logging.getLogger("pipeline.workers.baseline")


@dataclass(frozen=True)
class BaselineChoices:
    """What the command line chooses for one baseline member (the rest comes from the settings)."""

    worker_id: str
    budgets: tuple[int, ...]
    default_domain: str = "loan"
    variant: SummVariant = SummVariant.REWRITE
    trigger_wait_s: float = 60.0


def ensure_baseline_topics(settings: Settings, app_id: str, partitions: int, replication: int) -> None:
    """Creates (or checks) the baseline's own topics: as many partitions as its inputs, as replicated."""
    config = settings.kafka.client_config()
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    ensure_topics(admin_client(config), BaselineTopics(app_id).specs(partitions, bound), replication)


def _inputs(settings: Settings, wait_s: float) -> BaselineInputs:
    """The topics to read at the start: the shared ones, or the tenants' own (waiting for a first tenant)."""
    names = pipeline_names(settings)
    config = settings.kafka.client_config()
    if settings.kafka.tenancy != "topics":
        return BaselineInputs(names, by_topic=False, partitions=topic_partitions(config, names.events))
    inputs = BaselineInputs(names, by_topic=True, partitions=settings.kafka.tenant_partitions)
    deadline = time.monotonic() + wait_s
    while True:
        _, problems = inputs.update(partition_counts(config))
        for problem in problems:
            _LOG.error(problem)
        if inputs.tenants or time.monotonic() >= deadline:
            return inputs
        _LOG.info("no tenant has its topics yet (dpm tenants add); looking again in %g s", REFRESH_S)
        time.sleep(REFRESH_S)


def build_baseline(
    settings: Settings, choices: BaselineChoices, metrics: PipelineMetrics | None = None, *, wait_s: float = math.inf
) -> Baseline:
    """The baseline's faust app, configured but not started; its topics exist once this returns.

    With tenancy by topic it reads every tenant's own topics, and waits up to `wait_s` for a first
    tenant to be onboarded (faust subscribes to names: an app with none would read nothing).
    """
    config = settings.kafka.client_config()
    inputs = _inputs(settings, wait_s)
    if not inputs.tenants and inputs.by_topic:
        raise DpmError("no tenant has its topics yet: onboard one with `dpm tenants add`")
    options = BaselineOptions(
        worker_id=choices.worker_id,
        partitions=inputs.partitions,
        datadir=settings.paths.home / "baseline" / choices.worker_id,
        app_id=inputs.names.baseline_app,
        budgets=choices.budgets,
        default_domain=choices.default_domain,
        variant=choices.variant,
        trigger_wait_s=choices.trigger_wait_s,
        limits=TriggerLimits.of(settings.worker.max_trigger_positions, settings.worker.domains),
        concurrency=settings.model.concurrency,
        max_record_bytes=max_record_bytes(config),
        key_service_wait_s=settings.worker.key_service_wait_s,
    )
    ensure_baseline_topics(settings, options.app_id, options.partitions,
                           topic_replication(config, inputs.topics("events")[0]))  # fmt: skip
    options.datadir.mkdir(parents=True, exist_ok=True)
    backend = make_backend(settings.model)
    names = inputs.names
    cipher = tenant_case_keys(settings, names) if inputs.by_topic else case_keys_from(settings, names=names)
    baseline = Baseline(options, inputs, backend, faust_connection(settings.kafka), config, metrics=metrics,
                        cipher=cipher, seal=settings.keys.encryption,
                        window=context_window(settings.model, backend))  # fmt: skip
    if inputs.by_topic:
        baseline.follow_tenants(lambda: partition_counts(config))
    return baseline


class _DrainedWorker(faust.Worker):
    """faust's worker, which exits the process once stopping has taken longer than the drain deadline."""

    def __init__(self, *apps: Any, drain_s: float, **kwargs: Any) -> None:  # noqa: ANN401 - faust's signature
        super().__init__(*apps, **kwargs)
        self._drain_s = drain_s

    def install_signal_handlers(self) -> None:
        """mode's, but SIGUSR1 dumps the stacks at once (faulthandler), as every dpm process does.

        mode's own SIGUSR1 handler runs on the event loop, so it says nothing when the loop is the
        thing stuck, and it prints each frame's local variables, which may hold case content.
        """
        super().install_signal_handlers()
        self.loop.remove_signal_handler(signal.SIGUSR1)
        dump_stacks_on_sigusr1()

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
    port = settings.metrics.port_or(BASELINE_METRICS_PORT)
    if port >= 0:
        metrics.serve(port, settings.metrics.addr)
    baseline = build_baseline(settings, choices, metrics)
    if not baseline.inputs.by_topic:  # a growth or a changed partition count stops the member (SIGTERM: it drains)
        LayoutWatch(settings.kafka.client_config(), baseline.inputs.names,
                    lambda _reason: os.kill(os.getpid(), signal.SIGTERM)).start()  # fmt: skip
    app = baseline.app
    _DrainedWorker(app, drain_s=settings.worker.drain_s, loglevel="INFO", quiet=True,
                   logging_config=json_logging_config()).execute_from_commandline()  # fmt: skip
