"""Runs the MCP server over stdio (one tenant) or streamable HTTP (the HTTP API's keys)."""

from __future__ import annotations

from pipeline.client.aio import TenantMemories
from pipeline.config.settings import Settings
from pipeline.mcp_server.server import build_server
from pipeline.services.api_keys import ApiKeys, keys_file


def serve_stdio(settings: Settings, tenant: str) -> None:
    """Serves one tenant on stdin/stdout until the client closes them."""
    build_server(TenantMemories(settings), tenant).run("stdio")


def serve_http(settings: Settings, host: str, port: int) -> None:
    """Serves streamable HTTP at http://host:port/mcp; each request's API key names its tenant."""
    server = build_server(TenantMemories(settings), None, keys=ApiKeys(keys_file(settings)),
                          url=f"http://{host}:{port}")  # fmt: skip
    server.run("streamable-http", host=host, port=port)
