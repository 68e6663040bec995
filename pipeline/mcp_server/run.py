"""Runs the MCP server over stdio (one tenant) or streamable HTTP (the HTTP API's keys)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.routing import Route
from starlette.types import ASGIApp, Lifespan

from pipeline.client.aio import TenantMemories
from pipeline.config.settings import Settings
from pipeline.mcp_server.server import build_server
from pipeline.services.api_keys import ApiKeys, keys_file
from pipeline.services.door_routes import DoorRoutes, door_url
from pipeline.services.tenant_gate import gated
from pipeline.wire import door_checks

HttpApi = Callable[[TenantMemories, "DoorRoutes | None"], ASGIApp]


def serve_stdio(settings: Settings, tenant: str) -> None:
    """Serves one tenant on stdin/stdout until the client closes them; RefusedArgumentError for an invalid tenant id."""
    door_checks.tenant(tenant, "--tenant")
    memories = TenantMemories(settings, connect_timeout=settings.api.broker_wait_s)
    _server(settings, memories, tenant).run("stdio")


def serve_http(settings: Settings, host: str, port: int, http_api: HttpApi | None = None) -> None:
    """Serves streamable HTTP at http://host:port/mcp; each request's API key names its tenant.

    A door among the door replicas (DPM_DOOR_GROUP): it joins the doors' group, forwards an append
    for a case another door owns, and serves the HTTP API under /v1 beside MCP (`http_api`), so
    that appends forwarded to it by the other doors are made here.
    """
    memories = TenantMemories(settings, connect_timeout=settings.api.broker_wait_s)
    doors = None
    if settings.api.door_group:
        doors = DoorRoutes.join(settings, settings.api.door_url or door_url(host, port))
    server = _server(settings, memories, None, keys=ApiKeys(keys_file(settings)), url=f"http://{host}:{port}",
                     doors=doors)  # fmt: skip
    app = server.streamable_http_app(host=host)
    if http_api is not None:  # an ASGI app as a route's endpoint: it sees the whole path, /v1/... as it routes
        app.router.routes.append(Route("/v1/{rest:path}", endpoint=http_api(memories, doors)))
    if doors is not None:
        app.router.lifespan_context = _closing(app.router.lifespan_context, doors)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        if doors is not None:
            doors.groups.close()  # leaves the group: the other doors take its partitions over at once


def _closing(lifespan: Lifespan[Any], doors: DoorRoutes) -> Lifespan[Any]:
    """The app's lifespan, then the doors' connections closed on its event loop (the forwards' HTTP client)."""

    @asynccontextmanager
    async def closing(app: Any) -> AsyncIterator[Any]:  # noqa: ANN401 - Starlette's app and state
        async with lifespan(app) as state:
            try:
                yield state
            finally:
                await doors.close()

    return closing


def _server(settings: Settings, memories: TenantMemories, tenant: str | None,
            **options: Any) -> MCPServer:  # noqa: ANN401 - build_server's  # fmt: skip
    """The server over this process's tenants' clients, with the doors' bounds (DPM_API_*)."""
    return build_server(gated(settings, memories), tenant, max_wait_s=settings.api.max_wait_s,
                        broker_wait_s=settings.api.broker_wait_s, **options)  # fmt: skip
