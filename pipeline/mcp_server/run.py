"""Runs the MCP server over stdio (one tenant) or streamable HTTP (the HTTP API's keys)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from pipeline.client.aio import TenantMemories
from pipeline.config.settings import Settings
from pipeline.mcp_server.server import build_server
from pipeline.services.api_keys import ApiKeys, keys_file
from pipeline.services.tenant_gate import gated
from pipeline.wire import door_checks


def serve_stdio(settings: Settings, tenant: str) -> None:
    """Serves one tenant on stdin/stdout until the client closes them; RefusedArgumentError for an invalid tenant id."""
    door_checks.tenant(tenant, "--tenant")
    _server(settings, tenant).run("stdio")


def serve_http(settings: Settings, host: str, port: int) -> None:
    """Serves streamable HTTP at http://host:port/mcp; each request's API key names its tenant."""
    server = _server(settings, None, keys=ApiKeys(keys_file(settings)), url=f"http://{host}:{port}")
    server.run("streamable-http", host=host, port=port)


def _server(settings: Settings, tenant: str | None, **options: Any) -> MCPServer:  # noqa: ANN401 - build_server's
    """The server over this process's tenants' clients, with the doors' bounds (DPM_API_*)."""
    memories = gated(settings, TenantMemories(settings, connect_timeout=settings.api.broker_wait_s))
    return build_server(memories, tenant, max_wait_s=settings.api.max_wait_s,
                        broker_wait_s=settings.api.broker_wait_s, **options)  # fmt: skip
