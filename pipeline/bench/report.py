"""report.md in the DPM paper's table layout, with PNG figures (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers and CI
import matplotlib.pyplot as plt

from pipeline.bench.analysis import AXES

_NAMES = {"frp": "FRP", "rcs": "RCS", "eda": "EDA", "crr": "CRR", "citation_validity": "citations valid",
          "grounding_rate": "grounding"}  # fmt: skip


_MEANINGS = {
    "frp": "FRP, factual recall: the share of the case's required facts (amounts, scores, dates) the decision "
           "states by value",
    "rcs": "RCS, reasoning coherence: the share of the case's reasoning points the rationale covers (judged)",
    "eda": "EDA, decision accuracy: 1 when the decided label is the case's label, else 0",
    "crr": "CRR, compliance reconstruction: the share of the rules and provisions the case turns on that the "
           "decision cites (judged)",
}  # fmt: skip
_SIGNIFICANT = 0.05


def _stars(p: float) -> str:
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def figure_axes(stats: dict[str, Any], path: Path) -> None:
    """Grouped bars, DPM against Summ-only, per budget and axis, with significance marks."""
    budgets = list(stats["budgets"])
    fig, axes = plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets), 3.6), squeeze=False)
    for ax, budget in zip(axes[0], budgets, strict=True):
        metrics = stats["budgets"][budget]["metrics"]
        names = [a for a in AXES if a in metrics]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [metrics[a]["mean_dpm"] for a in names], 0.4, label="DPM")
        ax.bar([x + 0.2 for x in xs], [metrics[a]["mean_summ"] for a in names], 0.4, label="Summ-only")
        for x, a in zip(xs, names, strict=True):
            top = max(metrics[a]["mean_dpm"], metrics[a]["mean_summ"])
            ax.text(x, top + 0.03, _stars(metrics[a]["p_value"]), ha="center")
        ax.set_xticks(list(xs), [_NAMES[a] for a in names])
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("mean score (0 to 1)")
        ax.set_title(f"{budget} ({stats['budgets'][budget]['budget_chars_mean']:.0f} chars)")
    # Above the panels, so it covers no bar whatever the scores.
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_scaling(stats: dict[str, Any], path: Path) -> None:
    """DPM minus Summ-only per axis against the compression ratio rho, with 95% bootstrap CIs."""
    points = stats["scaling"]["points"]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for axis in AXES:
        rows = [(p["rho"], p["metrics"][axis]) for p in points if axis in p["metrics"]]
        rhos = [r for r, _ in rows]
        deltas = [m["delta"] for _, m in rows]
        errors = [[m["delta"] - m["ci_low"] for _, m in rows], [m["ci_high"] - m["delta"] for _, m in rows]]
        ax.errorbar(rhos, deltas, yerr=errors, marker="o", capsize=3, label=_NAMES[axis])
    ax.axhline(0, color="grey", linewidth=0.8)
    crossover = stats["scaling"]["crossover_rho"]
    if crossover is not None:
        ax.axvline(crossover, color="red", linestyle="--", linewidth=0.8, label=f"crossover rho={crossover:g}")
    ax.set_xscale("log")
    ax.set_xlabel("rho = trajectory characters / budget")
    ax.set_ylabel("DPM minus Summ-only (mean score)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_determinism(study: dict[str, Any], path: Path) -> None:
    """Unique view hashes out of R replays, per case and architecture."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for offset, (arch, data) in enumerate(study["archs"].items()):
        counts = [c["unique_sha256"] for c in data["cases"]]
        ax.bar([i + 0.4 * offset for i in range(len(counts))], counts, 0.4, label=arch)
    ax.set_ylim(0, study["replays"] + 0.5)
    ax.set_xlabel("case")
    ax.set_ylabel(f"unique SHA-256 of {study['replays']} replays")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _priced(stats: dict[str, Any]) -> bool:
    return any(s["cost_usd_per_decision"] for s in stats["per_arch"].values())


def figure_per_arch(stats: dict[str, Any], path: Path) -> None:
    """Audit surface (records per decision), tokens, cost (when priced) and wall time per decision, per architecture."""
    archs = list(stats["per_arch"])
    panels = [("audit_records_per_decision", "audit records"), ("tokens_per_decision", "tokens"),
              ("cost_usd_per_decision", "cost (US $)"), ("wall_s_per_decision", "wall time (s)")]  # fmt: skip
    if not _priced(stats):  # an empty panel says nothing: the report explains the zero instead
        panels = [p for p in panels if p[0] != "cost_usd_per_decision"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3.2), squeeze=False)
    for ax, (key, unit) in zip(axes[0], panels, strict=True):
        ax.bar(archs, [stats["per_arch"][a][key] for a in archs], color=["tab:blue", "tab:orange"][: len(archs)])
        ax.set_title(f"{unit} per decision")
        ax.set_ylabel(unit)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _budget_table(stats: dict[str, Any]) -> list[str]:
    lines = [
        "| budget | chars | axis | DPM | Summ | delta | 95% CI | p (method) | h | n |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for budget, body in stats["budgets"].items():
        for metric, m in body["metrics"].items():
            lines.append(
                f"| {budget} | {body['budget_chars_mean']:.0f} | {_NAMES[metric]} | {m['mean_dpm']:.3f} | "
                f"{m['mean_summ']:.3f} | {m['delta']:+.3f} | [{m['ci_low']:+.3f}, {m['ci_high']:+.3f}] | "
                f"{m['p_value']:.3f} ({m['p_method']}) | {m['cohens_h']:+.2f} | {m['n']} |"
            )
    return lines


def _arch_table(stats: dict[str, Any]) -> list[str]:
    lines = ["| architecture | decisions | audit records / decision | model calls / decision | tokens / decision | "
             "cost $ / decision | wall s / decision |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for arch, s in stats["per_arch"].items():
        lines.append(f"| {arch} | {s['decisions']} | {s['audit_records_per_decision']:.1f} | "
                     f"{s['llm_calls_per_decision']:.1f} | {s['tokens_per_decision']:.0f} | "
                     f"{s['cost_usd_per_decision']:.5f} | {s['wall_s_per_decision']:.3f} |")  # fmt: skip
    return lines


def _differences(stats: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Significant differences (p < 0.05) in words, and the (budget, axis) pairs without one."""
    found, none = [], []
    for budget, body in stats["budgets"].items():
        for metric, m in body["metrics"].items():
            if metric not in AXES:
                continue
            if m["p_value"] < _SIGNIFICANT and m["delta"]:
                winner = "DPM" if m["delta"] > 0 else "Summ-only"
                found.append(f"{winner} on {_NAMES[metric]} at the {budget} budget ({m['mean_dpm']:.3f} against "
                             f"{m['mean_summ']:.3f}, delta {m['delta']:+.3f}, p = {m['p_value']:.3f})")  # fmt: skip
            else:
                none.append(f"{_NAMES[metric]} at {budget}")
    return found, none


def _no_difference_why(stats: dict[str, Any]) -> str:
    metrics = [m for body in stats["budgets"].values() for a, m in body["metrics"].items() if a in AXES]
    if metrics and all(m["mean_dpm"] == m["mean_summ"] for m in metrics):
        level = {round(m["mean_dpm"], 3) for m in metrics}
        scores = f"both scored {level.pop():.3f} everywhere" if len(level) == 1 else "the scores are equal"
        return (f"{scores}: these cases do not separate the architectures at these budgets (every decisive fact "
                "fits in both memories). Harder cases (`dpm cases generate --hard`) or tighter budgets do; the "
                "compression-ratio sweep (`--scaling`) shows where.")  # fmt: skip
    return f"differences there are within what chance explains over {stats['n_cases']} cases (p >= 0.05)."


def _headline(stats: dict[str, Any]) -> list[str]:
    found, none = _differences(stats)
    lines = ["## Headline", ""]
    lines.append("Significant differences: " + ("; ".join(found) + "." if found else "none."))
    if none:
        where = "any axis at any budget" if not found else ", ".join(none)
        lines.append(f"No significant difference on {where}: {_no_difference_why(stats)}")
    lines += ["", "The axes, each a mean over cases in [0, 1], higher is better:", ""]
    lines += [f"- {_MEANINGS[a]}." for a in AXES]
    return lines


def _cost_note(stats: dict[str, Any]) -> list[str]:
    if _priced(stats):
        return ["Cost is the provider's list price of the tokens used (or DPM_PRICE_TABLE)."]
    return ["Cost is 0 and not drawn: the backend calls no priced model (the offline extractive backend, or "
            "a local server); a hosted backend reports the list price of the tokens used."]  # fmt: skip


def write_report(stats: dict[str, Any], meta: dict[str, Any], out: Path) -> Path:
    """Writes report.md and its figures into `out`; returns the report's path."""
    lines = [
        "# DPM against Summ-only",
        "",
        *_headline(stats),
        "",
        "## Setup",
        "",
        f"{stats['n_cases']} cases ({meta['domains']}), backend `{meta['backend']}` (model `{meta['model']}`), "
        f"judge `{meta['judge']}`, path `{meta['path']}`, seed {stats['seed']}. Two-sided paired sign-flip "
        "permutation tests (exact over all 2^n flips up to 16 cases, else 10,000 seeded random flips; p is "
        "never below 1 / flips), paired bootstrap 95% CIs of the mean delta, Cohen's h.",
        "",
        "## Four axes by budget",
        "",
        *_budget_table(stats),
        "",
        "![axes by budget](axes_by_budget.png)",
        "",
        "## Audit surface, cost and latency per decision",
        "",
        *_arch_table(stats),
        "",
        *_cost_note(stats),
    ]
    lines += ["", "![audit surface, tokens, cost and latency](per_arch.png)"]
    figure_axes(stats, out / "axes_by_budget.png")
    figure_per_arch(stats, out / "per_arch.png")
    if "scaling" in stats:
        crossover = stats["scaling"]["crossover_rho"]
        lines += ["", "## Compression-ratio scaling", "",
                  f"Crossover: {'rho = ' + format(crossover, 'g') if crossover is not None else 'none in the sweep'}"
                  " (the smallest swept rho from which DPM's mean advantage over the four axes stays positive).", "",
                  "| rho | axis | DPM | Summ | delta | 95% CI | p |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for point in stats["scaling"]["points"]:
            for metric in AXES:
                if metric in point["metrics"]:
                    m = point["metrics"][metric]
                    lines.append(
                        f"| {point['rho']:g} | {_NAMES[metric]} | {m['mean_dpm']:.3f} | {m['mean_summ']:.3f} "
                        f"| {m['delta']:+.3f} | [{m['ci_low']:+.3f}, {m['ci_high']:+.3f}] | {m['p_value']:.3f} |"
                    )
        lines += ["", "![delta against rho](scaling.png)"]
        figure_scaling(stats, out / "scaling.png")
    if "determinism" in stats:
        study = stats["determinism"]
        lines += ["", "## Determinism", "", f"{study['replays']} replays per case with `{study['backend']}`.", "",
                  "| architecture | byte-identical cases | mean unique SHA-256 | mean max distance | "
                  "mean max prefix distance |", "|---|---|---|---|---|"]  # fmt: skip
        for arch, data in study["archs"].items():
            lines.append(f"| {arch} | {data['byte_identical_cases']}/{len(data['cases'])} | "
                         f"{data['mean_unique_sha256']:.2f} | {data['mean_max_distance']:.4f} | "
                         f"{data['mean_max_prefix_distance']:.4f} |")  # fmt: skip
        lines += ["", "![determinism](determinism.png)"]
        figure_determinism(study, out / "determinism.png")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
