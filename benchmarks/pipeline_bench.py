"""Pipeline benchmark (figures, not pass/fail): scale-out under model latency, latency, reads, memory, cost.

Usage:
    python -m benchmarks.pipeline_bench [--sections scale,latency,...] [--out out/bench/figures.json]
    python -m benchmarks.pipeline_bench --page docs/operations/capacity.md --out benchmarks/figures.json  # its table

Uses DPM_BOOTSTRAP if set, else starts a private local broker on a free port and stops it after.
All figures of one run are measured side by side on the same broker and written, with the
machine they ran on, to the figures file; the docs' benchmark table (docs/operations/capacity.md) is rendered from it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson

from benchmarks import (
    api_bench,
    contest_bench,
    keys_bench,
    local_cache_bench,
    long_horizon,
    lookups_bench,
    prompt_cache_bench,
    writes_bench,
)
from benchmarks.runs import (
    SMALL_CASES,
    RunSpec,
    per_decision,
    read_costs,
    run_pipeline,
    sealing_cpu,
    startup,
    ui_pages,
    worker_memory,
)
from pipeline.config.settings import Settings
from pipeline.services.cluster import private_cluster

SECTIONS = (
    "startup",
    "read",
    "scale",
    "latency",
    "sealing",
    "per_decision",
    "rss_mb",
    "ui",
    "api",
    "writes",
    "lookups",
    "keys",
    "long_horizon",
    "contest",
    "prompt_cache",
)
MODEL_LATENCY_MS = 500
TARGETS = {
    "scale": {"c8_w1/c1_w1": 6.0, "c8_w2/c8_w1": 1.8, "c8_w4/c8_w1": 3.2},
    "latency_ms": {"p50": 100, "p99": 300},
    "read": {"foreign_100x/alone": 2.0, "foreign_1000x/alone": 4.0, "far_position_ms": 15.0},
    "rss_mb": {"growth_pct": 10.0},
    "sealing": {"cost_pct": 10.0},
    "startup": {"help_s": 1.0, "broker_status_s": 1.5},
    "long_horizon": long_horizon.TARGETS,
    "api": api_bench.TARGETS,
    "writes": writes_bench.TARGETS,
    "lookups": lookups_bench.TARGETS,
    "keys": keys_bench.TARGETS,
    "prompt_cache": {f"{name}/cache_share_of_nocache": share for name, share in prompt_cache_bench.TARGETS.items()},
}
LONG_HORIZON_PLOT = Path("docs/long-horizon.png")  # the long-cases page's plot, drawn from the figures file
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@contextmanager
def broker() -> Iterator[str]:
    settings = Settings.from_env()
    if settings.kafka.bootstrap_configured:
        yield settings.kafka.bootstrap_servers
        return
    with tempfile.TemporaryDirectory() as home, private_cluster(settings, Path(home)) as cluster:
        yield cluster.bootstrap


def _kafka(settings: Settings) -> str:
    if settings.kafka.bootstrap_configured:
        return f"the broker at {settings.kafka.bootstrap_servers}"
    return f"{settings.kafka.version}, a private local broker"


def machine() -> dict[str, Any]:
    """What the figures ran on."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    memory = re.search(r"^MemTotal:\s*(\d+)", meminfo, re.M)
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]+)', release, re.M)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model.group(1) if model else platform.processor(),
        "memory_gb": round(int(memory.group(1)) / 1024 / 1024, 1) if memory else None,
        "os": pretty.group(1) if pretty else platform.platform(),
        "python": platform.python_version(),
        "kafka": _kafka(Settings.from_env()),
        "confluent_kafka": version("confluent-kafka"),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _scale(bootstrap: str, work: Path) -> dict[str, Any]:
    """Decisions per second with every model call 500 ms slow: concurrency 1 and 8, one to four workers."""
    figures: dict[str, Any] = {"model_latency_ms": MODEL_LATENCY_MS}
    for name, workers, concurrency, triggers in (("c1_w1", 1, 1, 16), ("c8_w1", 1, 8, 96), ("c8_w2", 2, 8, 192),
                                                  ("c8_w4", 4, 8, 384)):  # fmt: skip
        settings = (("DPM_MODEL_LATENCY_MS", str(MODEL_LATENCY_MS)), ("DPM_MODEL_CONCURRENCY", str(concurrency)))
        spec = RunSpec(workers=workers, triggers=triggers, cases=SMALL_CASES, settings=settings)
        figures[name] = run_pipeline(bootstrap, work, spec).per_second()
    figures["c8_w1/c1_w1"] = figures["c8_w1"] / figures["c1_w1"]
    figures["c8_w2/c8_w1"] = figures["c8_w2"] / figures["c8_w1"]
    figures["c8_w4/c8_w1"] = figures["c8_w4"] / figures["c8_w1"]
    return figures


def _latency(bootstrap: str, work: Path) -> dict[str, Any]:
    """Trigger sent to decision readable (read_committed), offline backend, one worker, 4 triggers/s."""
    measured = run_pipeline(bootstrap, work, RunSpec(workers=1, triggers=120, rate=4.0, warmup=3))
    latencies = measured.latencies_ms()
    q = statistics.quantiles(latencies, n=100)
    return {"rate_per_s": 4.0, "triggers": len(latencies), "p50": q[49], "p90": q[89], "p99": q[98],
            "max": max(latencies), "first_ms": measured.warmup["w0"]}  # fmt: skip


def _read(bootstrap: str, _work: Path) -> dict[str, Any]:
    figures: dict[str, Any] = read_costs(bootstrap)
    figures["foreign_100x/alone"] = figures["foreign_100x_ms"] / figures["alone_ms"]
    figures["foreign_1000x/alone"] = figures["foreign_1000x_ms"] / figures["alone_ms"]
    return figures


def _sealing(bootstrap: str, work: Path, alternations: int = 4, triggers: int = 150) -> dict[str, Any]:
    """Decisions/s with encryption on and off, runs alternating ABBA (the broker slows as topics accumulate,
    and a fixed order would hand that drift to one side); and the in-process CPU of sealing."""
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for pair in range(alternations):
        for setting in ("off", "on") if pair % 2 == 0 else ("on", "off"):
            spec = RunSpec(workers=1, triggers=triggers, settings=(("DPM_ENCRYPTION", setting),))
            runs[setting].append(run_pipeline(bootstrap, work, spec).per_second())
    sealed, clear = statistics.fmean(runs["on"]), statistics.fmean(runs["off"])
    return {"triggers": triggers, "sealed": sealed, "clear": clear, "sealed_runs": runs["on"],
            "clear_runs": runs["off"], "cost_pct": (1 - sealed / clear) * 100, "cpu": sealing_cpu()}  # fmt: skip


def _rss(bootstrap: str, work: Path) -> dict[str, Any]:
    return worker_memory(bootstrap, work, triggers=10_000)


def _per_decision(_bootstrap: str, _work: Path) -> dict[str, Any]:
    return per_decision(MODEL_LATENCY_MS)


def _startup(_bootstrap: str, work: Path) -> dict[str, Any]:
    return startup(work)


def _ui(bootstrap: str, work: Path) -> dict[str, Any]:
    """Decision pages/s for 20 readers at once; then the same while 2 more clients replay on a 500 ms model."""
    figures: dict[str, Any] = dict(ui_pages(bootstrap, work))
    figures["with_replays"] = ui_pages(bootstrap, work, replayers=2, model_latency_ms=MODEL_LATENCY_MS)
    return figures


MEASURE: dict[str, Callable[[str, Path], dict[str, Any]]] = {
    "startup": _startup,
    "read": _read,
    "scale": _scale,
    "latency": _latency,
    "sealing": _sealing,
    "per_decision": _per_decision,
    "rss_mb": _rss,
    "ui": _ui,
    "api": api_bench.measure,
    "writes": writes_bench.measure,
    "lookups": lookups_bench.measure,
    "keys": lambda _bootstrap, _work: keys_bench.measure(),
    "long_horizon": lambda _bootstrap, _work: long_horizon.measure(),
    "contest": lambda _bootstrap, _work: contest_bench.measure(),
    "prompt_cache": lambda _bootstrap, _work: prompt_cache_bench.with_local(
        prompt_cache_bench.measure(), local_cache_bench.measure_if_installed()
    ),
}
KEY = {"latency": "latency_ms"}  # the figures file's name for a section, where it differs


def run(sections: tuple[str, ...]) -> dict[str, Any]:
    figures: dict[str, Any] = {"machine": machine(), "seconds": {}}
    with broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        for section in sections:
            started = time.monotonic()
            print(f"measuring {section} ...", flush=True)
            figures[KEY.get(section, section)] = MEASURE[section](bootstrap, Path(tmp))
            figures["seconds"][section] = round(time.monotonic() - started, 1)
    figures["targets"] = TARGETS
    return figures


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's rows (figure, value), from a figures file; sections not measured are left out."""
    out: list[tuple[str, str]] = []
    if start := figures.get("startup"):
        help_s, status_s = _f(start["help_s"], 2), _f(start["broker_status_s"], 2)
        first = f"{_f(start['help_first_s'], 2)} / {_f(start['broker_status_first_s'], 2)} s"
        out.append(("`dpm --help` / `dpm broker status` (none running) until they return, median of 5 after one",
                    f"{help_s} / {status_s} s (the first run: {first}; targets 1 / 1.5)"))  # fmt: skip
    if scale := figures.get("scale"):
        out += [
            ("decisions/s at 500 ms per model call, 1 worker, concurrency 1 / 8",
             f"{_f(scale['c1_w1'], 2)} / {_f(scale['c8_w1'], 2)} (x{_f(scale['c8_w1/c1_w1'], 2)}; target x6)"),
            ("the same, concurrency 8, 2 / 4 workers",
             f"{_f(scale['c8_w2'], 2)} / {_f(scale['c8_w4'], 2)} (x{_f(scale['c8_w2/c8_w1'], 2)} / "
             f"x{_f(scale['c8_w4/c8_w1'], 2)} of 1 worker; targets x1.8 / x3.2)"),
        ]  # fmt: skip
    if latency := figures.get("latency_ms"):
        out.append((f"trigger sent to decision readable, offline backend, 1 worker, 4 triggers/s "
                    f"({latency['triggers']} triggers after 3 warm-up ones)",
                    f"p50 {_f(latency['p50'], 0)} ms, p90 {_f(latency['p90'], 0)} ms, p99 {_f(latency['p99'], 0)} ms "
                    f"(targets p50 100, p99 300); a fresh worker's first trigger "
                    f"{_f(latency['first_ms'], 0)} ms"))  # fmt: skip
    if read := figures.get("read"):
        out += [
            ("reading one 90-event case by offset: alone / 100x / 1000x other traffic in its partition",
             f"{_f(read['alone_ms'])} / {_f(read['foreign_100x_ms'])} / {_f(read['foreign_1000x_ms'])} ms "
             f"(x{_f(read['foreign_100x/alone'])} / x{_f(read['foreign_1000x/alone'])}; targets x2 / x4); on "
             f"the broker before 10 s of reads warmed it: {_f(read['cold_alone_ms'])} / "
             f"{_f(read['cold_foreign_100x_ms'])} / {_f(read['cold_foreign_1000x_ms'])} ms"),
            ("a far-apart position: per position of the 1000x read / one read alone",
             f"{_f(read['far_position_ms'], 2)} / {_f(read['one_far_position_ms'], 2)} ms (target 15)"),
        ]  # fmt: skip
    if rss := figures.get("rss_mb"):
        out.append((f"a worker's resident memory: idle / after 500 / after {int(rss['triggers']):,} triggers",
                    f"{_f(rss['idle_mb'])} / {_f(rss['warm_mb'])} / {_f(rss['end_mb'])} MB "
                    f"({rss['growth_pct']:+.1f}% from 500 on; target within 10%)"))  # fmt: skip
    if cost := figures.get("per_decision"):
        for name in ("tight", "moderate"):
            b = cost[name]
            out.append((f"per decision at 500 ms per call, {name} budget ({b['budget_chars']} chars), in process",
                        f"DPM {b['dpm']['calls']} calls, {b['dpm']['tokens']:,} tokens, {_f(b['dpm']['wall_s'], 2)} s; "
                        f"Summ-only {b['summ']['calls']} calls, {b['summ']['tokens']:,} tokens, "
                        f"{_f(b['summ']['wall_s'], 2)} s: x{_f(b['speedup'])} faster"))  # fmt: skip
    if sealing := figures.get("sealing"):
        cpu = sealing["cpu"]
        out += [
            (f"decisions/s, 1 worker, backlog of {sealing['triggers']}: encryption on / off (ABBA runs)",
             f"{_f(sealing['sealed'])} / {_f(sealing['clear'])}: sealing costs {_f(sealing['cost_pct'])}% "
             f"(runs on {[round(r, 1) for r in sealing['sealed_runs']]}, off "
             f"{[round(r, 1) for r in sealing['clear_runs']]}; target 10%)"),
            (f"sealing CPU per decision, in process (open {cpu['events']} events, seal {cpu['outputs']} outputs)",
             f"+{_f(cpu['open_ms'] + cpu['seal_ms'], 2)} ms against {_f(cpu['decide_ms'])} ms for the decision "
             f"({_f((cpu['open_ms'] + cpu['seal_ms']) / cpu['decide_ms'] * 100)}%)"),
        ]  # fmt: skip
    if ui := figures.get("ui"):
        busy = ui["with_replays"]
        out += [
            (f"`dpm ui` decision pages (each reads its case's events and audit records), {ui['readers']} "
             f"readers at once for {ui['seconds']:.0f} s",
             f"{_f(ui['pages_per_s'])} pages/s, p50 {_f(ui['p50_ms'], 0)} ms, p99 {_f(ui['p99_ms'], 0)} ms, "
             f"{ui['failures']} failed"),
            (f"the same while {busy['replayers']} more clients press Replay now over and over "
             f"({busy['model_latency_ms']} ms per model call)",
             f"{_f(busy['pages_per_s'])} pages/s, p50 {_f(busy['p50_ms'], 0)} ms, p99 {_f(busy['p99_ms'], 0)} ms; "
             f"{busy['replays']} replays"),
        ]  # fmt: skip
    if api := figures.get("api"):
        out += [(f"front-door overhead per decision, {r['path']}, {r['waiters']} asked at once (p50 / p99)",
                 f"{_f(r['overhead_p50_ms'])} / {_f(r['overhead_p99_ms'])} ms (whole call p50 {_f(r['total_p50_ms'])} "
                 "ms)") for r in api["rows"]]  # fmt: skip
        out += [
            ("HTTP appends, 8 agents one step at a time", f"{_f(api['http_appends_per_s'])} per second"),
            ("resident memory of 1,000 waiting decide calls", f"{_f(api['waiters_1000_rss_mb'], 2)} MB"),
        ]
    sections = {"writes": _writes_rows, "lookups": _lookups_rows, "keys": _keys_rows,
                "long_horizon": _long_horizon_rows, "contest": _contest_rows,
                "prompt_cache": _prompt_cache_rows}  # fmt: skip
    for name, section_rows in sections.items():
        if section := figures.get(name):
            out += section_rows(section)
    return out


def _writes_rows(writes: dict[str, Any]) -> list[tuple[str, str]]:
    """Appends at the door: a new case's first, paced fleets, closed loops, replicas, the ceiling, transactional ids."""
    empty, filled = writes["first_append_empty"], writes["first_append_1m"]
    loop, plain, tids = writes["closed_loop"], writes["plain_producer"], writes["transactional_ids"]
    out = [
        ("a new case's first append over HTTP, p50 / p99: empty topics / "
         f"{filled['filler_events']:,} events of other cases in the topic",
         f"{_f(empty['p50_ms'])} / {_f(empty['p99_ms'])} ms; {_f(filled['p50_ms'])} / {_f(filled['p99_ms'])} ms "
         f"(x{_f(filled['ratio_to_empty'], 2)}; targets p50 50 ms, x1.5); folding them: warm door "
         f"{_f(filled['fold_warm_s'], 2)} s, a door on an empty store {_f(filled['restore_cold_s'], 2)} s"),
    ]  # fmt: skip
    out += [(f"append latency, {r['agents']:,} agents each on its own case, a step every 2 s (p50 / p99)",
             f"{_f(r['p50_ms'])} / {_f(r['p99_ms'])} ms ({r['appends']:,} appends)")
            for r in writes["paced"]]  # fmt: skip
    out += [(f"decision overhead with group commit, {r['path']}, {r['waiters']:,} asked at once (p50 / p99)",
             f"{_f(r['overhead_p50_ms'])} / {_f(r['overhead_p99_ms'])} ms") for r in writes["decisions"]]  # fmt: skip
    out += [
        (f"closed loop, {loop['agents']} agents appending back to back: HTTP / client library",
         f"{_f(loop['http_appends_per_s'])} / {_f(loop['client_appends_per_s'])} appends/s; the door's CPU "
         f"{_f(loop['door_cpu_ms_per_append'], 3)} ms per append (targets 1,500/s, 1 ms)"),
        ("the same records from one plain idempotent producer (the ceiling)",
         f"{_f(plain['records_per_s'])} records/s; HTTP appends are {writes['shares']['http_of_plain_producer']:.1%}"),
    ]  # fmt: skip
    out += [(f"{r['processes']} door process(es), 64 agents closed loop over HTTP",
             f"{_f(r['http_appends_per_s'])} appends/s, CPU {_f(r['door_cpu_ms_per_append'], 3)} ms per append, "
             f"{r['answers_409_or_412']} answers 409 or 412") for r in writes["replicas"]]  # fmt: skip
    out.append(
        (
            f"transactional ids on the broker after {tids['cases']:,} cases",
            f"{tids['ids']} ({tids['partitions']} partitions; target at most 2 x partitions x replicas)",
        )
    )
    out.append(("writes targets met", str(writes["targets_met"]).lower()))
    return out


def _prompt_cache_rows(cache: dict[str, Any]) -> list[tuple[str, str]]:
    """Input dollars with and without a provider's prompt cache, DPM against Summ-only, and the local model's answer."""
    out = [
        ("prompt caching: " + cache["note"], f"a {cache['case_chars']:,}-character case, measured {cache['measured']}")
    ]
    names = {"tasks_at_once": "3 tasks x 2 budgets at once",
             "agent_stream": f"a decision every 20 events as the case grows within an hour "
                             f"({cache['agent_stream']['decisions']} decisions)"}  # fmt: skip
    for key, name in names.items():
        s = cache[key]
        out.append((f"{name}: input dollars, DPM without cache / with cache / Summ-only",
                    f"${s['dpm_nocache_input_usd']:.4f} / ${s['dpm_cache_input_usd']:.4f} "
                    f"({_f(100 * s['cache_share_of_nocache'])}%, target {_f(100 * s['target_share'])}%) / "
                    f"${s['summ_input_usd']:.4f}; {s['calls']} calls, {s['cached_tokens']:,} tokens read from "
                    f"the cache, {s['uncached_tokens']:,} not"))  # fmt: skip
    local = cache.get("local")
    if local:
        out.append(("local model (llama.cpp, SmolLM2-135M): answers identical with cache_prompt on, whatever came "
                    "before / three tasks on one case, seconds off / on",
                    f"{_identical(local)} / "
                    f"{_f(local['three_tasks_s']['off'])} / {_f(local['three_tasks_s']['on'])} s"))  # fmt: skip
    return out


def _lookups_rows(lookups: dict[str, Any]) -> list[tuple[str, str]]:
    """One decision found by id, at each size of the output topics: warm, fresh, over HTTP, as a command."""
    out = []
    for size, row in lookups["sizes"].items():
        client, http, index = row["client"], row["http"], row["index"]
        out += [
            (f"lookups with {int(size):,} records per output topic: `decision(id)` / `explain(id)` warm, p50 / p99",
             f"{_f(client['decision']['p50_ms'])} / {_f(client['decision']['p99_ms'])} ms; "
             f"{_f(client['explain']['p50_ms'])} / {_f(client['explain']['p99_ms'])} ms (targets 20 / 100)"),
            ("the same, a fresh client's first `decision(id)` (its constructor apart) / `GET /v1/decisions/{id}`",
             f"{_f(client['fresh_decision']['p50_ms'])} / {_f(client['fresh_decision']['p99_ms'])} ms "
             f"(constructor {_f(client['fresh_constructor_p50_ms'])} ms); {_f(http['p50_ms'])} / "
             f"{_f(http['p99_ms'])} ms"),
            (f"the same, `dpm explain --decision` as a process (median of 3) / the index's first build on a host "
             f"without one ({index['records']:,} records)",
             f"{_f(row['cli_explain']['p50_s'], 2)} s (the auditor's page of the oldest: {_f(row['ui_oldest_ms'])} ms) "
             f"/ {_f(index['build_s'])} s, {_f(index['bytes_per_decision'])} "
             f"bytes per decision (target 300); catch-up of {row['catch_up']['decisions']:,} decisions "
             f"{_f(row['catch_up']['seconds'], 2)} s (target 5)"),
        ]  # fmt: skip
        pages = row.get("ui_pages")
        if pages is not None:
            first, last = _f(pages["first_page_ms"]), _f(pages["last_page_ms"])
            out.append(("the same, the auditor's list: its start / the first and last page of 5 / a case's page",
                        f"{_f(pages['start_s'], 2)} s / {first} and {last} ms / "
                        f"{_f(pages['case_page_ms'])} ms"))  # fmt: skip
    met = ", ".join(name for name, ok in lookups["checks"].items() if not ok) or "none"
    out.append(("lookups: largest / smallest size, p50", f"x{_f(lookups['largest_over_smallest'], 2)} (target x2); "
                                                          f"targets not met: {met}"))  # fmt: skip
    return out


def _keys_rows(keys: dict[str, Any]) -> list[tuple[str, str]]:
    """Each key provider's unwrap latency, and decisions a second against the local provider's at its cache hit rate."""
    out = []
    for name, row in keys["providers"].items():
        out.append(
            (
                f"key provider {name}: unwrap p50 / p99; decisions a second ({keys['decisions']} over "
                f"{keys['cases']} cases), share of local's, key cache hit rate",
                f"{_f(row['unwrap']['p50_ms'], 2)} / {_f(row['unwrap']['p99_ms'], 2)} ms; "
                f"{_f(row['decisions_per_s'])}, x{_f(row['share_of_local'], 2)} (target "
                f"x{_f(keys['targets']['decisions_share_of_local'], 1)}), {_f(100 * row['cache_hit_rate'])}%",
            )
        )
    out.append(("key provider vault_transit", keys["vault_transit"]))
    return out


def _contest_rows(contest: dict[str, Any]) -> list[tuple[str, str]]:
    """Decisive events found against the generator's truth, and what contests cost, DPM against Summ-only."""

    def share(value: float | None) -> str:
        return "-" if value is None else _f(value, 3)

    out = [("contests: " + contest["note"], f"{len(contest['rows'])} generated cases, measured {contest['measured']}"),
           ("decisive events: recall / precision against the generator's truth",
            f"{share(contest['decisive_recall'])} / {share(contest['decisive_precision'])} ("
            + ", ".join(f"{d} {share(v['decisive_recall'])} / {share(v['decisive_precision'])}"
                        for d, v in contest["by_domain"].items()) + ")")]  # fmt: skip
    for row in contest["cost"]:
        arch = "DPM" if row["arch"] == "dpm" else "Summ-only"
        out.append((f"{arch} at {row['chars']:,} characters: a what-if leaving out event {row['whatif_left_out']:,} "
                    f"of {row['events']:,} / a decisive analysis ({row['decisive_tested']} sets tried)",
                    f"{row['whatif_calls']:,} calls, {row['whatif_tokens']:,} tokens (from scratch "
                    f"{row['whatif_from_scratch_calls']:,}, {row['whatif_from_scratch_tokens']:,}) / "
                    f"{row['decisive_calls']:,} calls, {row['decisive_tokens']:,} tokens (from scratch "
                    f"{row['decisive_from_scratch_calls']:,}, {row['decisive_from_scratch_tokens']:,}), "
                    f"{_f(row['decisive_s'])} s"))  # fmt: skip
    return out


def _identical(local: dict[str, Any]) -> str:
    """Whether the local model answered alike with its prompt cache on, and how many answers differed."""
    if local["identical"]:
        return f"yes, all {local['compared']} answers"
    count = local.get("differing_count")
    differed = f"{count}" if count is not None else f"{len(local['differing'])} or more"
    return f"no: {differed} of {local['compared']} answers differed"


def _long_horizon_rows(horizon: dict[str, Any]) -> list[tuple[str, str]]:
    """Per length: DPM's first decision and re-decision at each window, and Summ-only's."""
    out: list[tuple[str, str]] = [("long horizons: in process, offline backend, measured",
                                   f"{horizon['measured']} (see the plot under the table)")]  # fmt: skip
    by_key = {(r["arch"], r["window_tokens"], r["chars"], r["run"]): r for r in horizon["rows"]}

    def cost(row: dict[str, Any]) -> str:
        if not row["finished"]:
            folded = f"{row['events_folded']:,} of {row['events']:,} events"
            return f"did not finish in {horizon['summ_cap_s']:.0f} s ({folded})"
        return f"{row['calls']:,} calls, {row['tokens']:,} tokens, {_f(row['wall_s'], 2)} s"

    for chars in sorted({r["chars"] for r in horizon["rows"]}):
        for window in sorted({r["window_tokens"] for r in horizon["rows"]}):
            first, again = by_key[("dpm", window, chars, "first")], by_key[("dpm", window, chars, "redecide")]
            share = long_horizon.redecide_share(horizon, window, chars)
            out.append((f"DPM at {chars:,} characters, {window:,}-token window: first decision / re-decision "
                        f"after one event ({horizon['latency_ms']} ms per call)",
                        f"{cost(first)} / {cost(again)} ({_f(share)}% of the first's tokens)"))  # fmt: skip
        summ = by_key[("summ", min(r["window_tokens"] for r in horizon["rows"]), chars, "first")]
        again = by_key[("summ", min(r["window_tokens"] for r in horizon["rows"]), chars, "redecide")]
        out.append((f"Summ-only at {chars:,} characters (any window): fold and decide / one more event",
                    f"{cost(summ)} / {cost(again) if again['finished'] else '-'}"))  # fmt: skip
    recall = horizon["frp_tight"]
    out.append((f"DPM factual recall at {horizon['budget_chars']:,} characters, generated cases, by length",
                ", ".join(f"{int(k):,}: {_f(v, 3)}" for k, v in recall.items())))  # fmt: skip
    return out


def table_section(figures: dict[str, Any]) -> str:
    """The benchmark table, with the machine it ran on."""
    m = figures["machine"]
    took = sum(figures.get("seconds", {}).values())
    head = (f"Measured {m['date']} on {m['cpus']} cores ({m['cpu_model']}), {m['memory_gb']} GB, {m['os']}, "
            f"Python {m['python']}, Kafka {m['kafka']} on the same host, confluent-kafka {m['confluent_kafka']}; "
            f"the run took {took / 60:.0f} min. Rendered from `benchmarks/figures.json`.")  # fmt: skip
    table = ["| figure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows(figures))]
    return "\n".join([BEGIN, head, "", *table, END])


def render_page(page: Path, figures_file: Path) -> None:
    """Renders the benchmark table between the page's markers, and the long-horizon plot into docs/."""
    figures = orjson.loads(figures_file.read_bytes())
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page} has no {BEGIN} ... {END} section")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    page.write_text(before + table_section(figures) + after)
    if "long_horizon" in figures:
        long_horizon.plot(figures["long_horizon"], Path(__file__).parents[1] / LONG_HORIZON_PLOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=Path("out/bench/figures.json"))
    parser.add_argument("--page", type=Path, help="render this page's benchmark table from --out; measure nothing")
    args = parser.parse_args()
    if args.page is not None:
        render_page(args.page, args.out)
        print(f"{args.page}: benchmark table rendered from {args.out}")
        return
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    figures = run(sections)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    width = max(len(name) for name, _ in rows(figures))
    for name, value in rows(figures):
        print(f"{name:<{width}}  {value}")
    print(f"figures written to {args.out}; `make bench-docs` renders the docs' table from them")


if __name__ == "__main__":
    main()
