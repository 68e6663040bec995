"""`dpm demo`: the main job end to end on the embedded defaults."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.cli.render import (
    comparison_json,
    output_console,
    print_comparison,
    print_json,
    print_replays,
    replays_json,
)
from pipeline.config.settings import Settings
from pipeline.core.verification import ReplayStatus

_out = output_console()


def demo(
    per_domain: int = typer.Option(2, "--per-domain", min=1, help="Generated cases per domain (four domains)."),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Where cases and worker logs go (default: a temp dir, removed at the end)."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for all decisions."),
    keep: bool = typer.Option(
        False, "--keep", help="Keep the topics, the folder and a broker the demo started, to replay them after."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON (progress goes to stderr)."),
) -> None:
    """Run the pipeline end to end: broker, topics, 2 workers + baseline, cases, triggers, comparison, replay."""
    from pipeline.services.demo import demo_session

    folder = workdir or Path(tempfile.mkdtemp(prefix="dpm-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    console = output_console(stderr=as_json)  # with --json, stdout holds the JSON alone
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        waiting = bar.add_task("generating cases and starting the pipeline", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(waiting, description="waiting for decisions", completed=done, total=total)

        with demo_session(Settings.from_env(), folder, per_domain=per_domain, timeout_s=timeout,
                          say=bar.console.print, progress=progress, keep=keep) as result:  # fmt: skip
            bar.stop()
            matched = sum(1 for line in result.replays if line.report.status is ReplayStatus.MATCH)
            if as_json:
                print_json({"topic_prefix": result.prefix, "triggers": result.triggers,
                            "dead_letters": result.dead_letters, "comparison": comparison_json(result.comparison,
                            result.duplicates), "replays": replays_json(result.replays), "folder": str(folder),
                            "kept": keep})  # fmt: skip
            else:
                print_comparison(_out, result.comparison, result.duplicates)
                print_replays(_out, result.replays)
                _out.print(f"topics: {result.prefix}.*  dead letters: {result.dead_letters}  replay: "
                           f"{matched}/{len(result.replays)} MATCH  files and logs: {folder}")  # fmt: skip
            if matched != len(result.replays):
                raise typer.Exit(2)
    if keep and result.replays:
        console.print(_replay_commands(result.prefix, str(result.replays[0].decision_id)))
    elif workdir is None:
        shutil.rmtree(folder, ignore_errors=True)
        console.print(f"removed {folder}; `dpm demo --keep` keeps the topics and files to replay them")


def _replay_commands(prefix: str, decision_id: str) -> str:
    return "\n".join([
        "replay and compare what the demo published (in this shell, with the same settings):",
        f"  DPM_TOPIC_PREFIX={prefix} dpm replay --decision {decision_id}",
        f"  DPM_TOPIC_PREFIX={prefix} dpm replay --all",
        f"  DPM_TOPIC_PREFIX={prefix} dpm compare",
    ])  # fmt: skip
