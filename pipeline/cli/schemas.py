"""`dpm schemas check`: released schemas unchanged, and every new version within its subject's rule."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.render import output_console
from pipeline.wire.evolution import check as check_schemas
from pipeline.wire.resources import schemas_dir

app = typer.Typer(help="The wire schemas: compatibility and immutability checks.", no_args_is_help=True)
_out = output_console()


@app.command()
def check(
    folder: Path | None = typer.Option(None, "--dir", help="A schemas folder (default: the package's own)."),
) -> None:
    """Check the schemas against compatibility.json: one line per problem, exit 1 if any."""
    where = folder or schemas_dir()
    problems = check_schemas(where)
    for problem in problems:
        _out.print(problem, markup=False, highlight=False)
    if problems:
        raise typer.Exit(1)
    _out.print(f"{where}: every released schema unchanged, every version within its subject's rule")
