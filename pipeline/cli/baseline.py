"""`dpm baseline`: one member of the Summ-only baseline group (faust-streaming)."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.core.run import SummVariant
from pipeline.observability.logs import configure_json_logging
from pipeline.workers.lifecycle import default_worker_id


def baseline(
    budgets: str = typer.Option(
        "5352",
        "--budgets",
        help="Budgets (characters) kept for every case, comma-separated; cases may declare more on their first event.",
    ),
    domain: str = typer.Option("loan", "--domain", help="Task domain for cases that declare no task."),
    variant: SummVariant = typer.Option(SummVariant.REWRITE, "--variant", help="rewrite (the paper's) or buffered."),
    worker_id: str | None = typer.Option(None, "--worker-id"),
    trigger_wait: float = typer.Option(
        60.0, "--trigger-wait", min=0, help="Seconds a trigger waits for its events to be summarized (slow models)."
    ),
    backend: str | None = typer.Option(None, "--backend", help="A registered backend (default DPM_BACKEND)."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Port of /metrics (default DPM_METRICS_PORT, else 9401; -1: off)."
    ),
) -> None:
    """Serve the Summ-only baseline: one summarization call per event, one decision per `summ` trigger."""
    from pipeline.workers.baseline.service import BaselineChoices, serve_baseline

    configure_json_logging()
    settings = broker_settings().with_choices(backend=backend, metrics_port=metrics_port)
    choices = BaselineChoices(
        worker_id=worker_id or default_worker_id("baseline"),
        budgets=tuple(int(b) for b in budgets.split(",") if b.strip()),
        default_domain=domain,
        variant=variant,
        trigger_wait_s=trigger_wait,
    )
    serve_baseline(settings, choices)
