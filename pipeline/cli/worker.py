"""`dpm worker`: one member of the stateless projection worker group."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.observability.logs import configure_json_logging
from pipeline.workers.lifecycle import default_worker_id, stop_on_signals


def worker(
    group: str | None = typer.Option(
        None, "--group", help="Consumer group (default <topic prefix>-projection); scale by starting more members."
    ),
    worker_id: str | None = typer.Option(None, "--worker-id", help="Member id (default: host-pid-random)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Triggers per transaction."),
    backend: str | None = typer.Option(None, "--backend", help="A registered backend (default DPM_BACKEND)."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Port of /metrics (default DPM_METRICS_PORT, else 9400; -1: off)."
    ),
) -> None:
    """Serve decision triggers: read the case by offset, project once, decide, publish in one transaction."""
    from pipeline.workers.projection.service import WorkerOptions, serve_projection

    configure_json_logging()
    settings = broker_settings().with_choices(backend=backend, metrics_port=metrics_port)
    options = WorkerOptions(worker_id=worker_id or default_worker_id("worker"), group_id=group, batch_size=batch_size)
    serve_projection(settings, options, stop_on_signals())
