"""`dpm demo`: the main job end to end on the embedded defaults."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.cli.render import print_comparison, print_replays
from pipeline.config.settings import Settings
from pipeline.core.verification import ReplayStatus

_out = Console()


def demo(
    per_domain: int = typer.Option(2, "--per-domain", min=1, help="Generated cases per domain (four domains)."),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Where cases and worker logs go (default: a temp dir)."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for all decisions."),
) -> None:
    """Run the pipeline end to end: broker, topics, 2 workers + baseline, cases, triggers, comparison, replay."""
    from pipeline.services.demo import run_demo

    folder = workdir or Path(tempfile.mkdtemp(prefix="dpm-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=_out
    ) as bar:
        waiting = bar.add_task("decisions published", total=None)
        result = run_demo(
            Settings.from_env(),
            folder,
            per_domain=per_domain,
            timeout_s=timeout,
            say=bar.console.print,
            progress=lambda done, total: bar.update(waiting, completed=done, total=total),
        )
    print_comparison(_out, result.comparison, result.duplicates)
    print_replays(_out, result.replays)
    matched = sum(1 for line in result.replays if line.report.status is ReplayStatus.MATCH)
    _out.print(
        f"topics: {result.prefix}.*  dead letters: {result.dead_letters}  replay: {matched}/{len(result.replays)} "
        f"MATCH  files and logs: {folder}"
    )
    if matched != len(result.replays):
        raise typer.Exit(2)
