"""Runs the MCP server over stdio (one tenant) or streamable HTTP (the HTTP API's keys)."""

from __future__ import annotations

from pipeline.client.aio import TenantMemories
from pipeline.config.settings import Settings
from pipeline.mcp_server.server import build_server
from pipeline.services.api_keys import ApiKeys, keys_file
from pipeline.services.tenant_gate import gated
from pipeline.wire import door_checks


def serve_stdio(settings: Settings, tenant: str) -> None:
    """Serves one tenant on stdin/stdout until the client closes them; RefusedArgumentError for an invalid tenant id."""
    door_checks.tenant(tenant, "--tenant")
    memories = gated(settings, TenantMemories(settings))
    build_server(memories, tenant, max_wait_s=settings.api.max_wait_s).run("stdio")


def serve_http(settings: Settings, host: str, port: int) -> None:
    """Serves streamable HTTP at http://host:port/mcp; each request's API key names its tenant."""
    server = build_server(gated(settings, TenantMemories(settings)), None, max_wait_s=settings.api.max_wait_s,
                          keys=ApiKeys(keys_file(settings)), url=f"http://{host}:{port}")  # fmt: skip
    server.run("streamable-http", host=host, port=port)
