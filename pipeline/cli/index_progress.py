"""What a command shows while it builds or rebuilds a lookup index: one line saying so, then a progress bar."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pipeline.cli.render import output_console
from pipeline.config.settings import Settings


class IndexProgress:
    """A catch-up report (kafka/reading/output_index.CatchUpReport) for a terminal: on stderr, stdout stays data.

    Shows nothing for a catch-up of fewer than `bar_from` offsets (DPM_INDEX_PROGRESS_FROM).
    """

    def __init__(self, bar_from: int, console: Console | None = None) -> None:
        self._console = console or output_console(stderr=True)
        self._bar_from = bar_from
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    @classmethod
    def of(cls, settings: Settings) -> IndexProgress:
        """The progress a command of these settings shows (from DPM_INDEX_PROGRESS_FROM offsets)."""
        return cls(settings.paths.index_progress_from)

    def begun(self, backlog: int, path: Path) -> None:
        if backlog < self._bar_from:
            return
        self._console.print(f"indexing {backlog:,} offsets of the output topics into {path}: a new or rebuilt "
                            "lookup index, or one not brought up to date for a while; later commands read only "
                            "what is published after", highlight=False, soft_wrap=True)  # fmt: skip
        self._bar = Progress(TextColumn("indexing"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=self._console,
                             transient=True)  # fmt: skip
        self._task = self._bar.add_task("indexing", total=backlog)
        self._bar.start()

    def advanced(self, done: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)

    def ended(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar, self._task = None, None
