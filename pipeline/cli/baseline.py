"""`dpm baseline`: one member of the Summ-only baseline group (faust-streaming)."""

from __future__ import annotations

import os

import faust
import typer

from pipeline.core.run import SummVariant
from pipeline.kafka.admin import admin_client
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.topics import TopicNames
from pipeline.llm.factory import BackendSettings, make_backend
from pipeline.observability.logs import configure_json_logging, json_logging_config
from pipeline.observability.metrics import PipelineMetrics
from pipeline.settings import Settings
from pipeline.workers.baseline import Baseline, BaselineOptions
from pipeline.workers.lifecycle import default_worker_id


def _partitions(settings: Settings, topic: str) -> int:
    metadata = admin_client(settings.client_config()).list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise KafkaAdapterError(f"topic {topic} does not exist: run `dpm topics create`")
    return len(found.partitions)


def baseline(
    budgets: str = typer.Option(
        "5352",
        "--budgets",
        help="Budgets (characters) kept for every case, comma-separated; cases may declare more on their first event.",
    ),
    domain: str = typer.Option("loan", "--domain", help="Task domain for cases that declare no task."),
    variant: SummVariant = typer.Option(SummVariant.REWRITE, "--variant", help="rewrite (the paper's) or buffered."),
    worker_id: str | None = typer.Option(None, "--worker-id"),
    backend: str | None = typer.Option(None, "--backend", help="extractive (default) or anthropic."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Port of /metrics (default DPM_METRICS_PORT or 9400; -1: off)."
    ),
) -> None:
    """Serve the Summ-only baseline: one summarization call per event, one decision per `summ` trigger."""
    configure_json_logging()
    settings = Settings.from_env()
    names = TopicNames(settings.topic_prefix)
    member = worker_id or default_worker_id("baseline")
    options = BaselineOptions(
        worker_id=member,
        bootstrap=settings.bootstrap_servers,
        partitions=_partitions(settings, names.events),
        datadir=settings.home / "baseline" / member,
        app_id=f"{settings.topic_prefix}-baseline",
        budgets=tuple(int(b) for b in budgets.split(",") if b.strip()),
        default_domain=domain,
        variant=variant,
    )
    options.datadir.mkdir(parents=True, exist_ok=True)
    metrics = PipelineMetrics(tuple(t for t in os.environ.get("DPM_METRICS_TENANTS", "").split(",") if t))
    port = metrics_port if metrics_port is not None else int(os.environ.get("DPM_METRICS_PORT", "9400"))
    if port >= 0:
        metrics.serve(port, os.environ.get("DPM_METRICS_ADDR", "0.0.0.0"))  # noqa: S104 - a container's port
    app = Baseline(options, names, make_backend(BackendSettings.from_env(backend)), metrics).app
    faust.Worker(app, loglevel="INFO", quiet=True, logging_config=json_logging_config()).execute_from_commandline()
