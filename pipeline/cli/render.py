"""Tables the CLI prints: comparisons and replay reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from pipeline.services.compare import Comparison
    from pipeline.services.replay import ReplayLine


def print_comparison(console: Console, result: Comparison, duplicates: int) -> None:
    """DPM against Summ-only on the triggers both decided."""
    table = Table(title=f"DPM vs Summ-only on {result.pairs} trigger(s) decided by both")
    for column in ("architecture", "decisions", "accuracy", "model calls", "tokens", "latency s", "cost $", "failed"):
        table.add_column(column, justify="right")
    for s in result.per_arch:
        accuracy = f"{s.accuracy:.3f} (n={s.labelled})" if s.accuracy is not None else "n/a"
        table.add_row(
            s.architecture.value,
            str(s.decisions),
            accuracy,
            f"{s.mean_calls:.1f}",
            f"{s.mean_tokens:.0f}",
            f"{s.mean_latency_s:.3f}",
            f"{s.total_cost_usd:.4f}",
            str(s.failures),
        )
    console.print(table)
    agreement = f"{result.agreement:.3f}" if result.agreement is not None else "n/a"
    console.print(f"agreement: {agreement}; duplicate decision ids: {duplicates}")


def print_replays(console: Console, lines: Sequence[ReplayLine]) -> None:
    """One row per replayed decision."""
    table = Table(title=f"replay of {len(lines)} decision(s)")
    for column in ("decision", "arch", "status", "distance", "prefix distance", "detail"):
        table.add_column(column)
    for line in lines:
        r = line.report
        table.add_row(
            str(line.decision_id),
            line.architecture.value,
            r.status.value,
            "" if r.view_distance is None else f"{r.view_distance:.4f}",
            "" if r.prefix_distance is None else f"{r.prefix_distance:.4f}",
            r.detail,
        )
    console.print(table)
