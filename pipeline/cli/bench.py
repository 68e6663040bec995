"""`dpm cases generate`, `dpm eval` and `dpm tams`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.bench.generate import DEFAULT_SEED, DOMAINS, GenerationSpec, Voice, generate_cases
from pipeline.bench.tams import Needs, select
from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.run import SummVariant
from pipeline.core.task import parse_architectures
from pipeline.wire.case_files import load_cases, write_case

cases_app = typer.Typer(help="Long-horizon decision cases.", no_args_is_help=True)
_out = output_console()


@cases_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="Folder for the case files."),
    domains: str = typer.Option(",".join(DOMAINS), "--domains", help="Comma-separated domains."),
    per_domain: int = typer.Option(5, "--per-domain", min=1),
    seed: int = typer.Option(DEFAULT_SEED, "--seed"),
    length: int | None = typer.Option(
        None, "--length", min=2_000, max=1_000_000, help="Target trajectory characters (default 26k to 28k)."
    ),
    adversarial: bool = typer.Option(False, "--adversarial", help="Plant prompt-injection text in some events."),
    hard: bool = typer.Option(False, "--hard", help="More decoys and amendments, decisive facts late."),
    voice: Voice = typer.Option(Voice.FORMS, "--voice", help="forms (tuning set); dossier, notes, letters."),
    tenant: str = typer.Option("bench", "--tenant"),
) -> None:
    """Generate seeded cases by inversion (label first, then documents that imply it)."""
    chosen = tuple(d.strip() for d in domains.split(",") if d.strip())
    spec = GenerationSpec(domains=chosen, per_domain=per_domain, seed=seed, adversarial=adversarial, tenant=tenant,
                          hard=hard, voice=voice)  # fmt: skip
    if length is not None:  # ~300 characters an event, as the default cases have; 24 hold every core document
        events = max(24, length // 300)
        spec = dataclasses.replace(spec, events=(events, events + 4), chars=(length, length + length // 50))
    cases = generate_cases(spec)
    for case in cases:
        write_case(case, out)
    _out.print(f"wrote {len(cases)} case(s) to {out}")


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def eval_command(
    cases: Path = typer.Option(..., "--cases", help="A folder of v1 case files."),
    out: Path = typer.Option(..., "--out", help="Folder for results.jsonl, stats.json, report.md, figures."),
    arch: str = typer.Option("dpm,summ", "--arch"),
    budgets: str = typer.Option(
        "tight,moderate,loose", "--budgets", help="Names (share of the mean length) or characters."
    ),
    backend: str = typer.Option("extractive", "--backend", help="A registered backend: extractive, anthropic, openai."),
    judge: str = typer.Option("keyword", "--judge", help="keyword (offline) or llm."),
    judge_backend_name: str = typer.Option(
        "anthropic", "--judge-backend", help="Backend of the LLM judge: anthropic or openai (ideally another family)."
    ),
    judge_model: str | None = typer.Option(None, "--judge-model", help="Model of the LLM judge (default DPM_MODEL)."),
    jobs: int = typer.Option(2, "--jobs", min=1, help="Parallel processes (in-process path)."),
    via_kafka: bool = typer.Option(False, "--via-kafka", help="Run through the broker, workers and baseline."),
    determinism: int = typer.Option(0, "--determinism", min=0, help="Replays per case for the determinism study."),
    scaling: str = typer.Option("", "--scaling", help="Compression ratios to sweep, e.g. 2,5,10,20,50."),
    variant: SummVariant = typer.Option(SummVariant.REWRITE, "--summ-variant"),
    seed: int = typer.Option(20260420, "--seed", help="Seed of the permutation tests and bootstraps."),
) -> None:
    """Evaluate DPM and Summ-only on the same cases: four axes, statistics, studies and a report."""
    from pipeline.bench.harness import EvalConfig
    from pipeline.services.evaluation import run_eval

    archs = parse_architectures(arch)
    if judge not in ("keyword", "llm"):
        raise DpmError(f"--judge takes keyword or llm, got {judge!r}")
    settings = Settings.from_env()
    judge_backend = None
    if judge == "llm":
        update: dict[str, str] = {"backend": judge_backend_name} | ({"model": judge_model} if judge_model else {})
        judge_backend = settings.model.model_copy(update=update)
    agent = settings.model.model_copy(update={"backend": backend})
    config = EvalConfig(archs=archs, budgets=_csv(budgets), backend=agent, judge=judge,
                        judge_backend=judge_backend, jobs=jobs, seed=seed, via_kafka=via_kafka, variant=variant,
                        determinism_replays=determinism, rhos=tuple(float(r) for r in _csv(scaling)))  # fmt: skip
    loaded = load_cases(cases)
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_out) as bar:  # fmt: skip
        task = bar.add_task("evaluating", total=None)
        stats = run_eval(loaded, out, config, settings, say=bar.console.print,
                         progress=lambda done, total: bar.update(task, completed=done, total=total))  # fmt: skip
    _out.print(f"{len(loaded)} cases in {time.perf_counter() - started:.1f}s -> {out / 'report.md'}")
    for budget, body in stats["budgets"].items():
        cells = [f"{m.upper()} {v['mean_dpm']:.3f}/{v['mean_summ']:.3f} (p={v['p_value']:.3f})"
                 for m, v in body["metrics"].items() if m in ("frp", "rcs", "eda", "crr")]  # fmt: skip
        _out.print(f"  {budget:>8} DPM/Summ: " + "  ".join(cells))


def tams(
    replay: bool = typer.Option(False, "--replay", help="The deployment must replay decisions deterministically."),
    audit: bool = typer.Option(False, "--audit", help="The deployment needs audit-ready rationale."),
    isolation: bool = typer.Option(False, "--isolation", help="The deployment needs tenant isolation."),
    rho: float | None = typer.Option(None, "--rho", help="Trajectory characters / budget of the deployment."),
    results: Path | None = typer.Option(None, "--results", help="An eval output folder with a --scaling sweep."),
) -> None:
    """The selection rule: which memory architecture this deployment should use, and why."""
    crossover = None
    if results is not None:
        stats = orjson.loads((results / "stats.json").read_bytes())
        crossover = stats.get("scaling", {}).get("crossover_rho")
    choice = select(Needs(replay=replay, audit=audit, isolation=isolation), rho, crossover)
    _out.print(f"[bold]{choice.architecture}[/]: {choice.reason}")
