"""`dpm ui`: the auditor's read-only web pages."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.observability.logs import configure_json_logging


def ui(
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port (default DPM_UI_PORT or 8080)."),
    addr: str | None = typer.Option(None, "--addr", help="Address to bind (default DPM_UI_ADDR or 127.0.0.1)."),
) -> None:
    """Serve the auditor's pages: decisions, their cited evidence, audit records and replay, one tenant per token."""
    from pipeline.services.auditor import KafkaAuditor
    from pipeline.ui import Tokens, serve

    settings = broker_settings()
    tokens = Tokens.from_settings(settings.ui)  # no token configured: one line, nothing served
    configure_json_logging()
    auditor = KafkaAuditor(settings)
    try:
        auditor.start(settings.ui.refresh_s)
        host, bound = addr or settings.ui.addr, port or settings.ui.port
        typer.echo(f"dpm ui: http://{host}:{bound}/ ({auditor.decided()} decisions indexed; Ctrl-C stops)")
        serve(auditor, tokens, settings.ui, host, bound)
    finally:
        auditor.close()
