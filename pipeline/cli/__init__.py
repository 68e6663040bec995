"""The `dpm` command."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from pipeline.cli import acl, api, bench, broker, docs, keys, model, schemas, tenants, topics
from pipeline.cli.baseline import baseline
from pipeline.cli.contest import explain, whatif
from pipeline.cli.demo import demo
from pipeline.cli.ingest import erase, produce, trigger
from pipeline.cli.inspect import compare, decisions, replay
from pipeline.cli.mcp import mcp
from pipeline.cli.ui import ui
from pipeline.cli.worker import worker
from pipeline.core.errors import DpmError

app = typer.Typer(
    name="dpm",
    help="Stateless decision memory for enterprise AI agents (Deterministic Projection Memory on Kafka).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Click's own help layout: flags show as flags (typer's rich layout writes `<bool>` after them).
    rich_markup_mode=None,
)
app.add_typer(broker.app, name="broker")
app.add_typer(topics.app, name="topics")
app.add_typer(model.app, name="model")
app.add_typer(keys.app, name="keys")
app.add_typer(acl.app, name="acl")
app.add_typer(tenants.app, name="tenants")
app.add_typer(api.app, name="api")
app.add_typer(schemas.app, name="schemas")
app.add_typer(docs.app, name="docs")
app.add_typer(bench.cases_app, name="cases")
app.command("eval")(bench.eval_command)
app.command()(bench.tams)
app.command()(demo)
app.command()(worker)
app.command()(baseline)
app.command()(ui)
app.command()(mcp)
for command in (produce, trigger, decisions, compare, replay, whatif, explain, erase):
    app.command()(command)

_err = Console(stderr=True, soft_wrap=True)

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: runs the command, printing expected errors as one line instead of a traceback."""
    try:
        app()
    except DpmError as exc:
        _err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        sys.exit(1)
