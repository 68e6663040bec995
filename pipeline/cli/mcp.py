"""`dpm mcp`: the MCP server for agents."""

from __future__ import annotations

import typer


def mcp(
    tenant: str | None = typer.Option(None, "--tenant", help="Over stdio: the tenant this server acts for."),
    http: bool = typer.Option(False, "--http", help="Streamable HTTP (API keys) instead of stdio."),
    port: int = typer.Option(8089, "--port", min=1, max=65535, help="With --http: the port."),
    addr: str = typer.Option("127.0.0.1", "--addr", help="With --http: the address to bind."),
) -> None:
    """Serve MCP tools: append a case's steps; ask for, read, explain and give reasons for its decisions."""
    from pipeline.cli.reach import broker_settings
    from pipeline.mcp_server.run import serve_http, serve_stdio

    settings = broker_settings()
    if http:
        typer.echo(f"dpm mcp: http://{addr}:{port}/mcp (Authorization: Bearer <API key>; Ctrl-C stops)", err=True)
        serve_http(settings, addr, port)
        return
    if tenant is None:
        raise typer.BadParameter("over stdio, give the tenant the server acts for: --tenant T")
    serve_stdio(settings, tenant)
