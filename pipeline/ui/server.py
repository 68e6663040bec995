"""Runs the auditor's application on an HTTP server (uvicorn) until interrupted."""

from __future__ import annotations

from typing import Any, cast

import uvicorn
from starlette.types import ASGIApp
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from pipeline.config.settings import UiSettings
from pipeline.ui.app import Auditor, create_app
from pipeline.ui.auth import Tokens


def asgi_app(auditor: Auditor, tokens: Tokens, settings: UiSettings) -> ASGIApp:
    """The application as served: sessions per the settings, forwarded headers believed from trusted proxies only.

    Behind a TLS-terminating proxy listed in DPM_UI_TRUSTED_PROXIES, the request's scheme is the
    forwarded one (so the session cookie is Secure) and its client the forwarded one (so throttling
    counts the real client); from anyone else those headers are ignored.
    """
    app = create_app(auditor, tokens, settings)
    # uvicorn types ASGI apps with its own narrower protocol; a Starlette app is one at run time.
    served = ProxyHeadersMiddleware(cast("Any", app), trusted_hosts=list(settings.trusted_proxies))
    return cast("ASGIApp", served)


def serve(auditor: Auditor, tokens: Tokens, settings: UiSettings, host: str, port: int) -> None:
    """Serves until SIGINT or SIGTERM; access logs are off (requests carry tokens in headers and cookies)."""
    uvicorn.run(asgi_app(auditor, tokens, settings), host=host, port=port, log_level="warning", access_log=False,
                proxy_headers=False)  # fmt: skip
