"""`dpm compare`, `dpm replay`: what came out of the pipeline, checked."""

from __future__ import annotations

import datetime as dt
import time
from contextlib import closing
from itertools import groupby

import typer

from pipeline.cli.index_progress import IndexProgress
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
from pipeline.core.events import CaseRef
from pipeline.core.verification import ReplayStatus
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.services.compare import compare as compare_outputs
from pipeline.services.lookups import case_decisions, open_index, published, published_decision
from pipeline.services.read_outputs import PublishedOutputs, load_outputs
from pipeline.services.replay import (
    ReplayLine,
    erased_lines,
    registry_backends,
    replay_many,
    select_decisions,
    select_erased,
)
from pipeline.services.tenants import topic_scopes, topics_of
from pipeline.wire.trigger import DecisionId, DecisionKey

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
    since: str | None = typer.Option(
        None, "--since", help="With --tenant: its decisions from this time on (ISO 8601), oldest first, in pages."
    ),
    after: str | None = typer.Option(None, "--after", help="With --since: the page after this decision id."),
    limit: int = typer.Option(100, "--limit", min=1, max=1000, help="With --since: most decisions in a page."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with each view's facts) instead of a table."),
) -> None:
    """List published decisions: label, events read, facts and how to replay each (erased cases by id only)."""
    settings = broker_settings()
    if since is not None:
        if tenant is None:
            raise DpmError("--since lists one tenant's decisions: say whose with --tenant")
        _page_since(settings, tenant, _time_ms(since), after, limit, as_json=as_json)
        return
    deadline = time.monotonic() + wait
    while True:
        outputs = _published(settings, tenant, case_id)
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


def _time_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 date or time (UTC unless it says otherwise)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise DpmError(
            f"--since {text!r} is not an ISO 8601 date or time (e.g. 2026-12-01 or 2026-12-01T09:00Z)"
        ) from exc
    return int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp() * 1000)


def _page_since(settings: Settings, tenant: str, since_ms: int, after: str | None, limit: int, *,
                as_json: bool) -> None:  # fmt: skip
    """One page of the tenant's decisions from `since_ms`, oldest first, read through the lookup index.

    On the tenant's current topics (with tenancy by topic, its own). Pages go by publish time, up to
    what is settled: a decision is stamped when produced and may commit up to the transaction timeout
    later, so the newest DPM_TRANSACTION_TIMEOUT_MS (and 5 s for clocks) wait for a later page, and no
    page is ever passed by one that commits late.
    """
    scope = topics_of(settings, tenant)
    settled_ms = int(time.time() * 1000) - settings.worker.transaction_timeout_ms - _CLOCK_MARGIN_MS
    config = settings.kafka.client_config()
    with (
        closing(case_keys_from(settings, names=scope, by_case=True)) as keys,
        closing(open_index(settings, scope, config, report=IndexProgress.of(settings))) as index,
    ):
        index.catch_up()
        entries = index.store.since(tenant, since_ms, settled_ms, after, limit)
        if entries is None:
            raise DpmError(f"--after {after}: tenant {tenant} has no published decision of that id")
        outputs = published(index, entries, keys, with_audits=False)
    chosen = [outputs.decisions[k] for k in (DecisionKey(tenant, DecisionId.parse(e.decision_id)) for e in entries)
              if k in outputs.decisions]  # fmt: skip
    erased = [e.decision_id for e in entries if DecisionKey(tenant, DecisionId.parse(e.decision_id)) in outputs.erased]
    last = entries[-1].decision_id if len(entries) == limit else None
    if as_json:
        print_json({"decisions": decisions_json(chosen, outputs.views), "erased": erased, "next_after": last})
        return
    print_decisions(_out, chosen)
    if erased:
        _out.print(f"{len(erased)} decision(s) of erased cases (content destroyed): " + ", ".join(erased))
    settle_s = (settings.worker.transaction_timeout_ms + _CLOCK_MARGIN_MS) / 1000
    _out.print(f"next page: --after {last}" if last else f"last page (decisions of the last {settle_s:g} s come "
                                                         "once they are settled)")  # fmt: skip


_CLOCK_MARGIN_MS = 5_000  # hosts' clocks apart, at most: a decision's stamp is its producer's clock


def _published(settings: Settings, tenant: str | None, case_id: str | None) -> PublishedOutputs:
    """The decisions and views on every set of topics this principal can read (`tenant`'s only, when given).

    One case of one tenant is read through the lookup index: only its records.
    """
    outputs = PublishedOutputs()
    config = settings.kafka.client_config()
    one_case = tenant is not None and case_id is not None
    for scope in topic_scopes(settings, tenant):
        with closing(case_keys_from(settings, names=scope, by_case=one_case)) as keys:
            if tenant is not None and case_id is not None:
                with closing(open_index(settings, scope, config, report=IndexProgress.of(settings))) as index:
                    entries = case_decisions(index, CaseRef(tenant, case_id)) or []
                    outputs.absorb(published(index, entries, keys, with_audits=False))
            else:
                outputs.absorb(load_outputs(config, scope, cipher=keys, with_audits=False, with_triggers=False))
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
        with closing(case_keys_from(settings, names=scope, by_case=decision is not None)) as keys:
            if decision is not None:  # one decision: its records only, found through the lookup index
                with closing(open_index(settings, scope, config, report=IndexProgress.of(settings))) as index:
                    outputs = published_decision(index, DecisionId.parse(decision), tenant, keys)
            else:
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
