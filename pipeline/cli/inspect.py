"""`dpm compare`, `dpm replay`: what came out of the pipeline, checked."""

from __future__ import annotations

import time
from contextlib import closing
from itertools import groupby

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import (
    comparison_json,
    decisions_json,
    output_console,
    print_comparison,
    print_decisions,
    print_json,
    print_replays,
    replays_json,
)
from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.verification import ReplayStatus
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.services.compare import compare as compare_outputs
from pipeline.services.read_outputs import PublishedOutputs, load_outputs
from pipeline.services.replay import (
    ReplayLine,
    erased_lines,
    registry_backends,
    replay_many,
    select_decisions,
    select_erased,
)
from pipeline.services.tenants import topic_scopes

_out = output_console()


def compare(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Compare DPM and Summ-only on the triggers both decided: agreement, accuracy, calls, tokens, latency, cost."""
    settings = broker_settings()
    outputs = PublishedOutputs()
    for scope in topic_scopes(settings):  # the shared topics, or every tenant's own
        with closing(case_keys_from(settings, names=scope)) as keys:
            outputs.absorb(load_outputs(settings.kafka.client_config(), scope, cipher=keys, with_audits=False))
    result = compare_outputs(outputs.decisions, outputs.triggers)
    erased = sorted({c.key for c in outputs.erased.values()})
    if as_json:
        print_json({**comparison_json(result, outputs.duplicates), "erased_cases": erased})
        return
    print_comparison(_out, result, outputs.duplicates)
    if outputs.erased:
        _out.print(f"{len(outputs.erased)} decision(s) of erased cases left out (content destroyed): "
                   + ", ".join(erased))  # fmt: skip


def decisions(
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="One tenant's decisions (with tenancy by topic, read with no more than that tenant's grants).",
    ),
    case_id: str | None = typer.Option(None, "--case", help="One case's decisions."),
    wait: float = typer.Option(0, "--wait", min=0, help="Seconds to wait for --count matching decisions."),
    count: int = typer.Option(1, "--count", min=1, help="With --wait: how many decisions to wait for."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with each view's facts) instead of a table."),
) -> None:
    """List published decisions: label, events read, facts and how to replay each (erased cases by id only)."""
    settings = broker_settings()
    deadline = time.monotonic() + wait
    while True:
        outputs = _published(settings, tenant)
        chosen = [record for key, record in sorted(outputs.decisions.items(), key=lambda kv: kv[0])
                  if tenant in (None, key.tenant) and case_id in (None, record.case.case_id)]  # fmt: skip
        erased = sorted(str(key.decision_id) for key, case in outputs.erased.items()
                        if tenant in (None, case.tenant) and case_id in (None, case.case_id))  # fmt: skip
        if len(chosen) + len(erased) >= count or time.monotonic() >= deadline:
            break
        time.sleep(1)
    if not chosen and not erased:
        raise DpmError("no published decision matches" + (f" after waiting {wait:g} s" if wait else ""))
    if as_json:
        print_json({"decisions": decisions_json(chosen, outputs.views), "erased": erased})
    else:
        print_decisions(_out, chosen)
        if erased:
            _out.print(f"{len(erased)} decision(s) of erased cases (content destroyed): " + ", ".join(erased))
    if len(chosen) + len(erased) < count:
        raise DpmError(f"{len(chosen) + len(erased)} of {count} decision(s) published within {wait:g} s")


def _published(settings: Settings, tenant: str | None) -> PublishedOutputs:
    """The decisions and views on every set of topics this principal can read (`tenant`'s only, when given)."""
    outputs = PublishedOutputs()
    for scope in topic_scopes(settings, tenant):
        with closing(case_keys_from(settings, names=scope)) as keys:
            outputs.absorb(load_outputs(settings.kafka.client_config(), scope, cipher=keys, with_audits=False,
                                        with_triggers=False))  # fmt: skip
    return outputs


def replay(
    decision: str | None = typer.Option(None, "--decision", help="One decision id."),
    tenant: str | None = typer.Option(None, "--tenant", help="All decisions of a tenant (and --case)."),
    case_id: str | None = typer.Option(None, "--case"),
    all_decisions: bool = typer.Option(False, "--all", help="Every published decision."),
    verify_recorded: bool = typer.Option(False, "--verify-recorded", help="No model call: check the recorded answer."),
    backend: str | None = typer.Option(
        None,
        "--backend",
        help="Re-run with this backend (default: the recorded backend id; `recorded`: the recorded answers).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Re-read each decision's recorded offsets, re-derive its view and report MATCH, DRIFT, LOG-CHANGED or ERASED."""
    if decision is None and tenant is None and not all_decisions:
        raise DpmError("say which decisions to replay: --decision ID, --tenant T [--case C], or --all")
    settings = broker_settings()
    backends = registry_backends(settings.model, backend)
    lines: list[ReplayLine] = []
    config = settings.kafka.client_config()
    for scope in topic_scopes(settings, tenant):  # each decision is replayed against the events topic it read
        with closing(case_keys_from(settings, names=scope)) as keys:
            outputs = load_outputs(config, scope, cipher=keys, with_triggers=False)
            records = select_decisions(outputs.decisions.values(), decision=decision, tenant=tenant, case_id=case_id,
                                       every=all_decisions)  # fmt: skip
            erased = select_erased(outputs.erased, decision=decision, tenant=tenant, case_id=case_id,
                                   every=all_decisions)  # fmt: skip
            first = scope.of_generation(1).events  # what v1 records read: there was no other generation then
            by_topic = groupby(sorted(records, key=lambda r: (r.events_topic or first, r.key)),
                               key=lambda r: r.events_topic or first)  # fmt: skip
            for topic, read_from in by_topic:  # the topic a v2 record names, else its scope's first (v1)
                with closing(KafkaEventLog(config, topic)) as log:
                    lines += replay_many(list(read_from), outputs.views, outputs.audits, log, backends,
                                         recorded_only=verify_recorded, cipher=keys)  # fmt: skip
            lines += erased_lines(erased)
    if not lines:
        raise DpmError("no published decision matches")
    if as_json:
        print_json(replays_json(lines))
    else:
        print_replays(_out, lines)
    if any(line.report.status is not ReplayStatus.MATCH for line in lines):
        raise typer.Exit(2)
