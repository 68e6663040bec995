"""What the CLI prints: comparisons and replay reports, as tables for people or JSON for programs."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from pipeline.services.compare import Comparison
    from pipeline.services.replay import ReplayLine
    from pipeline.wire.decision import DecisionRecord
    from pipeline.wire.trigger import DecisionKey
    from pipeline.wire.view import ViewRecord

# Piped output is read by programs and people later: tables keep their natural width instead of
# being cut to 80 columns (ids would end in an ellipsis).
_PIPED_WIDTH = 400


def output_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): the terminal's width on a terminal, full width when piped."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr) if stream.isatty() else Console(stderr=stderr, width=_PIPED_WIDTH)


def print_json(value: Any) -> None:  # noqa: ANN401 - any JSON-shaped value
    """`value` as indented JSON on stdout (no colours, no wrapping)."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def comparison_json(result: Comparison, duplicates: int) -> dict[str, Any]:
    """The comparison as JSON: per architecture, per decision figures (cost in US dollars, in total)."""
    return {
        "pairs": result.pairs,
        "agreement": result.agreement,
        "duplicate_decision_ids": duplicates,
        "per_architecture": {
            s.architecture.value: {
                "decisions": s.decisions,
                "accuracy": s.accuracy,
                "labelled": s.labelled,
                "model_calls_per_decision": s.mean_calls,
                "tokens_per_decision": s.mean_tokens,
                "latency_s_per_decision": s.mean_latency_s,
                "cost_usd_total": s.total_cost_usd,
                "failed": s.failures,
            }
            for s in result.per_arch
        },
    }


def replays_json(lines: Sequence[ReplayLine]) -> list[dict[str, Any]]:
    """One object per replayed decision."""
    return [
        {
            "decision_id": str(line.decision_id),
            "tenant": line.key.tenant,
            "architecture": line.architecture.value,
            "status": line.report.status.value,
            "view_distance": line.report.view_distance,
            "prefix_distance": line.report.prefix_distance,
            "detail": line.report.detail,
        }
        for line in lines
    ]


def takeaway(result: Comparison) -> str | None:
    """One line: how much more model work Summ-only did than DPM for the same decisions."""
    by_arch = {s.architecture.value: s for s in result.per_arch}
    dpm, summ = by_arch.get("dpm"), by_arch.get("summ")
    if dpm is None or summ is None or not dpm.mean_calls or not dpm.mean_tokens:
        return None
    calls, tokens = summ.mean_calls / dpm.mean_calls, summ.mean_tokens / dpm.mean_tokens
    return f"Summ-only made {calls:.1f}x the model calls of DPM and used {tokens:.1f}x its tokens, per decision."


def print_comparison(console: Console, result: Comparison, duplicates: int) -> None:
    """DPM against Summ-only on the triggers both decided."""
    table = Table(title=f"DPM vs Summ-only on {result.pairs} trigger(s) decided by both")
    columns = ("architecture", "decisions", "accuracy", "model calls / decision", "tokens / decision",
               "latency s / decision", "cost $ (total)", "failed")  # fmt: skip
    for column in columns:
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
    if all(s.total_cost_usd == 0 for s in result.per_arch):
        console.print("cost is 0: the backend that decided calls no priced model (the offline extractive backend)")
    line = takeaway(result)
    if line is not None:
        console.print(line)


def print_replays(console: Console, lines: Sequence[ReplayLine]) -> None:
    """One row per replayed decision."""
    table = Table(title=f"replay of {len(lines)} decision(s)")
    for column in ("decision", "tenant", "arch", "status", "distance", "prefix distance", "detail"):
        table.add_column(column)
    for line in lines:
        r = line.report
        table.add_row(
            str(line.decision_id),
            line.key.tenant,
            line.architecture.value,
            r.status.value,
            "" if r.view_distance is None else f"{r.view_distance:.4f}",
            "" if r.prefix_distance is None else f"{r.prefix_distance:.4f}",
            r.detail,
        )
    console.print(table)


def decisions_json(records: Sequence[DecisionRecord], views: Mapping[DecisionKey, ViewRecord]) -> list[dict[str, Any]]:
    """One object per decision: what it decided, on what, and the view's facts with their citations."""
    shown = []
    for record in records:
        view = views.get(record.key)
        shown.append({
            "decision_id": str(record.decision_id), "tenant": record.case.tenant, "case_id": record.case.case_id,
            "architecture": record.architecture.value, "label": record.outcome.label,
            "rationale": record.outcome.rationale, "events": record.events_count, "model": record.model,
            "facts": [{"text": f.text, "citations": list(f.citations)} for f in view.view.facts] if view else None,
            "replay": f"dpm replay --decision {record.decision_id}",
        })  # fmt: skip
    return shown


def print_decisions(console: Console, records: Sequence[DecisionRecord]) -> None:
    """One row per decision, with the command that replays it."""
    table = Table(title=f"{len(records)} decision(s)")
    for column in ("decision", "tenant", "case", "arch", "label", "events", "replay with"):
        table.add_column(column)
    for record in records:
        table.add_row(str(record.decision_id), record.case.tenant, record.case.case_id, record.architecture.value,
                      record.outcome.label or "(none)", str(record.events_count),
                      f"dpm replay --decision {record.decision_id}")  # fmt: skip
    console.print(table)
