"""`dpm model`: a local OpenAI-compatible model server (llama.cpp on loopback) for the `openai` backend."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.llm import local_model

app = typer.Typer(help="Run a local OpenAI-compatible model server on loopback (llama.cpp).", no_args_is_help=True)
_out = output_console()


@app.command()
def up(
    gguf: Path | None = typer.Option(None, "--gguf", help="A GGUF model file (default: the shipped SmolLM2-135M)."),
    port: int = typer.Option(8080, "--port", help="Loopback port of the server."),
    threads: int = typer.Option(2, "--threads", min=1, help="Threads, pinned: the same count gives the same bytes."),
    context: int = typer.Option(8192, "--context", min=512, help="Context length in tokens."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for /v1/models to answer."),
    cache_prompt: bool = typer.Option(
        False,
        "--cache-prompt/--no-cache-prompt",
        help="Reuse what was evaluated for an earlier request's prompt prefix (see docs/how-to/local-model.md).",
    ),
) -> None:
    """Start the server and wait until /v1/models answers."""
    home = Settings.from_env().paths.home
    spec = local_model.ServerSpec(gguf or local_model.shipped_gguf(), port, threads, context, cache_prompt=cache_prompt)
    with _out.status(f"starting llama.cpp on {spec.gguf.name}"):
        running, already = local_model.start(home, spec, timeout)
    _out.print(f"{'already running' if already else 'up'}: {running.model} at {running.base_url} "
               f"(sha256 {running.sha256[:16]}..., {running.threads} threads)")  # fmt: skip
    _out.print(f"use it: DPM_BACKEND=openai DPM_OPENAI_BASE_URL={running.base_url} DPM_MODEL={running.model}")


@app.command()
def down() -> None:
    """Stop the server."""
    stopped = local_model.stop(Settings.from_env().paths.home)
    _out.print(f"stopped {stopped.model}" if stopped else "no local model server was running")


@app.command()
def status() -> None:
    """Report whether the server runs and answers (exit 3 when none runs, 2 when it does not answer)."""
    running = local_model.read_running(Settings.from_env().paths.home)
    if running is None:
        _out.print("no local model server is running")
        raise typer.Exit(3)
    if not local_model.answers(running.base_url):
        _out.print(f"process {running.pid} runs but {running.base_url}/models does not answer")
        raise typer.Exit(2)
    _out.print(f"up: {running.model} at {running.base_url} (pid {running.pid}, sha256 {running.sha256}, "
               f"{running.threads} threads)")  # fmt: skip
