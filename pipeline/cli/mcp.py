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

    stdio_tenant = None if http else _stdio_tenant(tenant)  # said before the broker is reached for
    settings = broker_settings()
    if stdio_tenant is None:
        typer.echo(f"dpm mcp: http://{addr}:{port}/mcp (Authorization: Bearer <API key>; Ctrl-C stops)", err=True)
        from pipeline.api.server import door_api

        serve_http(settings, addr, port, lambda memories, doors: door_api(settings, memories, doors))
        return
    serve_stdio(settings, stdio_tenant)


def _stdio_tenant(tenant: str | None) -> str:
    """The tenant a stdio server acts for, checked as every door checks a tenant id."""
    from pipeline.wire import door_checks
    from pipeline.wire.door_checks import RefusedArgumentError

    if tenant is None:
        raise typer.BadParameter("over stdio, give the tenant the server acts for: --tenant T")
    try:
        return door_checks.tenant(tenant, "--tenant")
    except RefusedArgumentError as exc:
        raise typer.BadParameter(str(exc)) from None
