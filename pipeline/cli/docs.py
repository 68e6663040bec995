"""`dpm docs reference`: the documentation's reference pages, generated from the code."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.render import output_console

app = typer.Typer(help="The documentation site's generated pages.", no_args_is_help=True)
_out = output_console()


@app.command()
def reference(
    folder: Path = typer.Option(Path("docs/reference"), "--dir", help="Where the reference pages go."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if a page is out of date."),
) -> None:
    """Write the reference pages (commands, settings, schemas, metrics, dead-letter reasons) from the code."""
    from pipeline.cli import app as dpm
    from pipeline.cli.reference import write_or_check

    stale = write_or_check(dpm, folder, check=check)
    for line in stale:
        _out.print(line, markup=False, highlight=False)
    if stale:
        raise typer.Exit(1)
    _out.print(f"{folder}: the reference pages are up to date" if check else f"wrote the reference pages to {folder}")
