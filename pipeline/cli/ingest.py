"""`dpm produce`, `dpm trigger`, `dpm erase`: what goes into the log."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.core.task import TaskSpec, parse_architectures
from pipeline.services.erase import erase_case, erase_tenant
from pipeline.services.ingest import (
    case_request,
    manifest_requests,
    produce_cases,
    produce_events,
    read_manifest,
    send_triggers,
)
from pipeline.wire.case_files import load_cases, load_event_lines

_out = output_console()


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
    budgets = tuple(int(b) for b in summ_budgets.split(",") if b.strip())
    if (cases is None) == (events is None):
        raise DpmError("give exactly one of --cases or --events")
    loaded_cases = load_cases(cases, tenant) if cases is not None else None
    loaded_events = load_event_lines(events) if events is not None else None
    settings = broker_settings()  # after the inputs: a bad file is refused as such, broker or not
    if loaded_cases is not None:
        produced = produce_cases(settings, loaded_cases, budgets)
        written = [e.to_json() for e in produced.entries]
    else:
        produced = produce_events(settings, loaded_events or [])
        written = [{"events": len(produced.positions),
                    "positions": [[p.partition, p.offset] for p in produced.positions]}]  # fmt: skip
    _out.print(f"appended {len(produced.positions)} event(s) to {', '.join(produced.topics) or 'no topic'}")
    if manifest is not None:
        manifest.write_bytes(orjson.dumps(written, option=orjson.OPT_INDENT_2))
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
    architectures = parse_architectures(arch)
    if manifest is not None:
        try:
            data = manifest.read_bytes()
        except OSError as exc:
            raise DpmError(f"{manifest}: {exc.strerror}") from exc
        requests = manifest_requests(read_manifest(data), budget, architectures)
    elif tenant and case_id:
        spec = TaskSpec(domain, task, tuple(label.strip() for label in labels.split(",")))
        requests = [case_request(CaseRef(tenant, case_id), spec, budget, architectures)]
    else:
        raise DpmError("give --manifest, or --tenant and --case")
    send_triggers(broker_settings(), requests)
    for request in requests:
        _out.print(
            f"triggered {request.trigger_id} for {request.case.key} ({','.join(a.value for a in architectures)},"
            f" {request.budget_chars} chars)"
        )


def erase(
    tenant: str = typer.Option(..., "--tenant"),
    case_id: str | None = typer.Option(None, "--case", help="One case (default: every case of the tenant)."),
) -> None:
    """Erase a case (or a whole tenant): its data key destroyed, its events tombstoned.

    Every reader treats it as erased at once; compaction removes the records within DPM_ERASURE_LAG_MS.
    """
    settings = broker_settings()
    done = erase_case(settings, CaseRef(tenant, case_id)) if case_id else erase_tenant(settings, tenant)
    if not done.found:  # erasing is idempotent: what is gone stays gone, and saying so is not an error
        _out.print(f"nothing of {done.subject} to erase: never written, or erased already")
        return
    _out.print(f"erased {done.subject}: {done.keys_destroyed} data key(s) destroyed, "
               f"{done.event_tombstones} event tombstone(s) and {done.segment_tombstones} segment view tombstone(s) "
               f"written; compaction removes the records")  # fmt: skip
