"""Runs the auditor's application on an HTTP server (uvicorn) until interrupted."""

from __future__ import annotations

import uvicorn

from pipeline.ui.app import Auditor, create_app
from pipeline.ui.auth import Tokens


def serve(auditor: Auditor, tokens: Tokens, host: str, port: int) -> None:
    """Serves until SIGINT or SIGTERM; access logs are off (requests carry tokens in headers and cookies)."""
    uvicorn.run(create_app(auditor, tokens), host=host, port=port, log_level="warning", access_log=False)
