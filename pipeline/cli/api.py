"""`dpm api`: the HTTP API for agents, and its keys."""

from __future__ import annotations

import typer

from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.services.api_keys import ADMIN, ApiKeys, keys_file

app = typer.Typer(help="The HTTP API for agents (/v1, OpenAPI at /openapi.json) and its keys.",
                  invoke_without_command=True)  # fmt: skip
keys_app = typer.Typer(help="API keys: one per tenant (or admin), printed once, stored as hashes.",
                       no_args_is_help=True)  # fmt: skip
app.add_typer(keys_app, name="keys")
_out = output_console()


@app.callback()
def api(
    context: typer.Context,
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port (default DPM_API_PORT or 8088)."),
    addr: str | None = typer.Option(None, "--addr", help="Address to bind (default DPM_API_ADDR or 127.0.0.1)."),
    workers: int = typer.Option(1, "--workers", min=1, max=64, help="uvicorn worker processes."),
) -> None:
    """Serve the HTTP API: append a case's steps, ask for its decision, read it back (an API key per tenant)."""
    if context.invoked_subcommand is not None:
        return
    from pipeline.api.server import serve
    from pipeline.cli.reach import broker_settings

    settings = broker_settings()
    stored = ApiKeys(keys_file(settings)).listed()
    host, bound = addr or settings.api.addr, port or settings.api.port
    typer.echo(f"dpm api: http://{host}:{bound}/v1 ({len(stored)} key(s) in {keys_file(settings)}; Ctrl-C stops)")
    serve(host, bound, workers)


@keys_app.command("add")
def add(
    tenant: str | None = typer.Option(None, "--tenant", help="The tenant the key acts for."),
    admin: bool = typer.Option(False, "--admin", help="A key that erases cases (of any tenant), nothing else."),
) -> None:
    """Make a key; it is printed once and stored only as a hash."""
    if (tenant is None) == (not admin):
        raise typer.BadParameter("give --tenant T or --admin")
    store = ApiKeys(keys_file(Settings.from_env()))
    made, key = store.add(ADMIN if admin else str(tenant))
    _out.print(f"API key {made.key_id} for {'admin' if admin else tenant} (shown once; keep it secret):")
    typer.echo(key)


@keys_app.command("remove")
def remove(
    key_id: str | None = typer.Option(None, "--id", help="One key, by the id `keys add` and `keys list` show."),
    tenant: str | None = typer.Option(None, "--tenant", help="Every key of a tenant."),
) -> None:
    """Revoke keys: every replica refuses them from its next request."""
    if (key_id is None) == (tenant is None):
        raise typer.BadParameter("give --id K or --tenant T")
    removed = ApiKeys(keys_file(Settings.from_env())).remove(key_id=key_id, tenant=tenant)
    _out.print(f"removed {len(removed)} API key(s)")


@keys_app.command("list")
def listed() -> None:
    """The keys: id, tenant, when made (never the key)."""
    for key in ApiKeys(keys_file(Settings.from_env())).listed():
        _out.print(f"{key.key_id}  {'admin' if key.admin else key.tenant}  {key.created}")
