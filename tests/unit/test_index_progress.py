"""The progress a command shows while it builds a lookup index: a line and a bar for a long catch-up only."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from pipeline.cli.index_progress import IndexProgress


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, force_terminal=False), out


def test_a_short_catch_up_shows_nothing() -> None:
    console, out = _console()
    progress = IndexProgress(1000, console)
    progress.begun(999, Path("/home/index/outputs.sqlite"))
    progress.advanced(999)
    progress.ended()
    assert out.getvalue() == ""


def test_a_long_catch_up_says_what_it_builds_and_ends_its_bar() -> None:
    console, out = _console()
    progress = IndexProgress(1000, console)
    progress.begun(250_000, Path("/home/index/outputs.sqlite"))
    progress.advanced(100_000)
    progress.advanced(250_000)
    progress.ended()
    said = out.getvalue()
    assert "indexing 250,000 offsets of the output topics into /home/index/outputs.sqlite" in said
    assert "later commands read only what is published after" in said
    progress.ended()  # ending twice (a failed catch-up's finally after a stop) is harmless
