"""`dpm produce`, `dpm trigger`, `dpm compare`, `dpm replay`: the pipeline from the command line."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console

from pipeline.casefiles import load_cases, load_event_lines
from pipeline.cli.render import print_comparison, print_replays
from pipeline.compare import compare as compare_outputs
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import TaskSpec, parse_architectures, resolve_budget
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.wire import CaseOpening, DecisionRequest
from pipeline.llm.factory import BackendSettings, make_backend
from pipeline.outputs_index import load_outputs
from pipeline.replaying import replay_many
from pipeline.settings import Settings

_out = Console()


def produce(
    cases: Path | None = typer.Option(None, "--cases", help="A case file or a folder of case files."),
    events: Path | None = typer.Option(None, "--events", help="A JSON-lines file of events."),
    tenant: str | None = typer.Option(None, "--tenant", help="Override the cases' tenant."),
    manifest: Path | None = typer.Option(None, "--manifest", help="Write each case's positions here (JSON)."),
    summ_budgets: str = typer.Option(
        "", "--summ-budgets", help="Budgets the Summ-only baseline keeps for these cases."
    ),
) -> None:
    """Append events to the log. Every input is validated first: a bad file sends nothing."""
    if (cases is None) == (events is None):
        raise DpmError("give exactly one of --cases or --events")
    settings = Settings.from_env()
    producer = EventProducer(settings.client_config(), TopicNames(settings.topic_prefix))
    budgets = tuple(int(b) for b in summ_budgets.split(",") if b.strip())
    entries: list[dict[str, Any]] = []
    if cases is not None:
        loaded = load_cases(cases, tenant)
        for case in loaded:
            positions = producer.append(case.trajectory.events, CaseOpening(case.task, budgets))
            entries.append({"tenant": case.ref.tenant, "case_id": case.ref.case_id, "label": case.label,
                            "chars": case.trajectory.char_length,
                            "task": case.task.wire(),
                            "positions": [[p.partition, p.offset] for p in positions]})  # fmt: skip
    elif events is not None:
        loaded_events = load_event_lines(events)
        positions = producer.append(loaded_events)
        entries.append({"events": len(loaded_events), "positions": [[p.partition, p.offset] for p in positions]})
    producer.close()
    sent = sum(len(e["positions"]) for e in entries)
    _out.print(f"appended {sent} event(s) to {settings.topic_prefix}.events")
    if manifest is not None:
        manifest.write_bytes(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
        _out.print(f"positions written to {manifest}")


def trigger(
    manifest: Path | None = typer.Option(None, "--manifest", help="From `dpm produce --manifest`."),
    tenant: str | None = typer.Option(None, "--tenant"),
    case_id: str | None = typer.Option(None, "--case"),
    domain: str = typer.Option("loan", "--domain"),
    task: str = typer.Option("Decide the case.", "--task"),
    labels: str = typer.Option("APPROVE,DENY", "--labels", help="Label space, comma-separated."),
    budget: str = typer.Option("5352", "--budget", help="Characters, or tight|moderate|loose of the case length."),
    arch: str = typer.Option("dpm,summ", "--arch", help="dpm, summ or dpm,summ."),
) -> None:
    """Request decisions: for every case of a manifest (positions known), or for one case (resolved by scan)."""
    settings = Settings.from_env()
    producer = EventProducer(settings.client_config(), TopicNames(settings.topic_prefix))
    architectures = parse_architectures(arch)
    requests = []
    if manifest is not None:
        entries = [e for e in orjson.loads(manifest.read_bytes()) if "case_id" in e]
        mean_chars = sum(e["chars"] for e in entries) / max(1, len(entries))  # named budgets: share of the mean
        for entry in entries:
            positions = tuple(LogPosition(p, o) for p, o in entry["positions"])
            spec = TaskSpec.from_wire(entry["task"])
            _, chars = resolve_budget(budget, mean_chars)
            requests.append(
                DecisionRequest(
                    uuid.uuid4().hex,
                    CaseRef(entry["tenant"], entry["case_id"]),
                    spec,
                    chars.chars,
                    architectures,
                    positions,
                    len(positions),
                    entry.get("label"),
                )
            )
    elif tenant and case_id:
        spec = TaskSpec(domain, task, tuple(label.strip() for label in labels.split(",")))
        if not budget.isdigit():
            raise DpmError("without a manifest the case length is unknown: give --budget in characters")
        _, chars = resolve_budget(budget, 0.0)
        requests.append(DecisionRequest(uuid.uuid4().hex, CaseRef(tenant, case_id), spec, chars.chars, architectures))
    else:
        raise DpmError("give --manifest, or --tenant and --case")
    for request in requests:
        producer.trigger(request)
        _out.print(
            f"triggered {request.trigger_id} for {request.case.key} ({','.join(a.value for a in architectures)},"
            f" {request.budget_chars} chars)"
        )
    producer.close()


def erase(
    tenant: str = typer.Option(..., "--tenant"),
    case_id: str = typer.Option(..., "--case"),
) -> None:
    """Erase a case's events (tombstones; compaction removes them): its decisions then replay as ERASED."""
    settings = Settings.from_env()
    names = TopicNames(settings.topic_prefix)
    case = CaseRef(tenant, case_id)
    log = KafkaEventLog(settings.client_config(), names.events)
    try:
        keys = [r.key for r in log.scan(case).records if r.key is not None]
    finally:
        log.close()
    if not keys:
        raise DpmError(f"no events of {case.key} in {names.events}")
    producer = EventProducer(settings.client_config(), names)
    count = producer.erase(case, keys)
    producer.close()
    _out.print(f"wrote {count} tombstone(s) for {case.key}; compaction removes the events")


def compare() -> None:
    """Compare DPM and Summ-only on the triggers both decided: agreement, accuracy, calls, tokens, latency, cost."""
    settings = Settings.from_env()
    outputs = load_outputs(settings.client_config(), TopicNames(settings.topic_prefix), with_audits=False)
    result = compare_outputs(outputs.decisions, outputs.triggers)
    print_comparison(_out, result, outputs.duplicates)


def replay(
    decision: str | None = typer.Option(None, "--decision", help="One decision id."),
    tenant: str | None = typer.Option(None, "--tenant", help="All decisions of a tenant (and --case)."),
    case_id: str | None = typer.Option(None, "--case"),
    all_decisions: bool = typer.Option(False, "--all", help="Every published decision."),
    verify_recorded: bool = typer.Option(False, "--verify-recorded", help="No model call: check the recorded answer."),
    backend: str | None = typer.Option(
        None,
        "--backend",
        help="Re-run with this backend (default: the recorded backend id).",
    ),
) -> None:
    """Re-read each decision's recorded offsets, re-derive its view and report MATCH, DRIFT, LOG-CHANGED or ERASED."""
    settings = Settings.from_env()
    names = TopicNames(settings.topic_prefix)
    outputs = load_outputs(settings.client_config(), names)
    records = [r for r in outputs.decisions.values()
               if all_decisions or r["decision_id"] == decision
               or (tenant and r["tenant"] == tenant and (case_id is None or r["case_id"] == case_id))]  # fmt: skip
    if not records:
        raise DpmError("no published decision matches")
    chosen = BackendSettings.from_env(backend or records[0]["backend"]) if (backend or not verify_recorded) else None
    model = make_backend(chosen) if chosen and chosen.backend != "recorded" else None
    log = KafkaEventLog(settings.client_config(), names.events)
    try:
        lines = replay_many(records, outputs.views, outputs.audits, log, model, recorded_only=verify_recorded)
    finally:
        log.close()
    print_replays(_out, lines)
    if any(line.report.status.value != "MATCH" for line in lines):
        raise typer.Exit(2)
