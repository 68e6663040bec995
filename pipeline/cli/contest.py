"""`dpm whatif`, `dpm explain`: contest a published decision, and explain it (decisive events, reasons)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import typer

from pipeline.cli.index_progress import IndexProgress
from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console, print_json
from pipeline.core.contest import AdverseReasons, ContestError, Decisive, EventChange, WhatIf
from pipeline.core.explanation import fact_rows
from pipeline.core.view import Fact
from pipeline.services.contest import (
    DEFAULT_MAX_CALLS,
    Found,
    asker,
    contest_decisive,
    contest_reasons,
    contest_whatif,
    find_decision,
    keys_for,
    publish_contest,
    read_contests,
    require_contests_topic,
)
from pipeline.services.lookups import open_index
from pipeline.wire.contest import ContestRecord, facts_wire, reasons_outcome

_out = output_console()

_DECISION = typer.Option(..., "--decision", help="The decision id, <trigger id>:<architecture>.")
_TENANT = typer.Option(None, "--tenant", help="Whose decision, when several tenants used the id.")
_WHY = typer.Option("", "--why", help="Why it is asked (recorded with the contest, sealed).")
_JSON = typer.Option(False, "--json", help="Print JSON instead of text.")


def whatif(
    decision: str = _DECISION,
    drop: list[str] = typer.Option([], "--drop", help="Event indices to leave out: K or K,K,... (repeatable)."),
    replace: list[str] = typer.Option(
        [], "--replace", help='K=FILE: event K replaced by FILE, a JSON object {"kind": ..., "text": ...}.'
    ),
    tenant: str | None = _TENANT,
    why: str = _WHY,
    max_calls: int = typer.Option(DEFAULT_MAX_CALLS, "--max-calls", min=0, help="Most new model calls to make."),
    as_json: bool = _JSON,
) -> None:
    """Re-decide a published decision with events left out or replaced; the original is never touched."""
    changes = (*_dropped(drop), *(_replacement(r) for r in replace))
    if not changes:
        raise ContestError("say what changes: --drop K[,K...] and/or --replace K=FILE")
    settings = broker_settings()
    cipher_for, close = keys_for(settings)
    try:
        found = find_decision(settings, decision, tenant, cipher_for, IndexProgress.of(settings))
        require_contests_topic(settings, found.scope)
        outcome, record = contest_whatif(settings, found, changes, asker(settings, why), max_calls)
        publish_contest(settings, found, record, cipher_for(found.scope))
    finally:
        close()
    if as_json:
        print_json(_whatif_json(found, outcome, record))
        return
    _print_whatif(found, outcome, record)


def explain(
    decision: str = _DECISION,
    tenant: str | None = _TENANT,
    decisive: bool = typer.Option(False, "--decisive", help="Find the events without which the decision changes."),
    reasons: bool = typer.Option(False, "--reasons", help="The principal reasons of an adverse decision."),
    max_calls: int = typer.Option(
        DEFAULT_MAX_CALLS, "--max-calls", min=0, help="Most new model calls each analysis may make."
    ),
    why: str = _WHY,
    as_json: bool = _JSON,
) -> None:
    """A decision's facts with the events they cite; with --decisive and --reasons, what it rests on (recorded)."""
    settings = broker_settings()
    cipher_for, close = keys_for(settings)
    try:
        found = find_decision(settings, decision, tenant, cipher_for, IndexProgress.of(settings))
        if decisive or reasons:
            require_contests_topic(settings, found.scope)
        result: dict[str, Any] = {"decision_id": str(found.record.decision_id), "label": found.contested.label}
        lines = _explained(found)
        if decisive:
            analysis, record = contest_decisive(settings, found, asker(settings, why), max_calls)
            publish_contest(settings, found, record, cipher_for(found.scope))
            result |= _decisive_json(analysis, record)
            lines += _decisive_lines(analysis, record)
        if reasons:
            given, record = contest_reasons(settings, found, asker(settings, why), max_calls)
            publish_contest(settings, found, record, cipher_for(found.scope))
            result["reasons"] = _reasons_json(given, record)
            lines += ["", *given.render(), f"recorded as contest {record.contest_id}"]
        if not decisive and not reasons:
            result["facts"] = _facts_json(found)
            with closing(open_index(settings, found.scope, report=IndexProgress.of(settings))) as index:
                contests = read_contests(index, found, cipher_for(found.scope))
            result["contests"] = [{"contest_id": c.contest_id, "kind": c.kind.value if c.kind else None,
                                   "replay": c.report.status.value} for c in contests]  # fmt: skip
            lines += [f"contest {c.contest_id} ({c.kind.value if c.kind else 'erased'}): {c.report.status.value}"
                      for c in contests]  # fmt: skip
    finally:
        close()
    if as_json:
        print_json(result)
        return
    for line in lines:
        _out.print(line, highlight=False, markup=False)


def _dropped(values: list[str]) -> list[EventChange]:
    changes = []
    for value in values:
        for part in value.split(","):
            changes.append(EventChange(_index(part, "--drop")))
    return changes


def _index(text: str, option: str) -> int:
    try:
        index = int(text.strip())
    except ValueError:
        raise ContestError(f"{option}: {text.strip()!r} is not an event index (1, 2, ...)") from None
    if index < 1:
        raise ContestError(f"{option}: event indices start at 1, got {index}")
    return index


def _replacement(value: str) -> EventChange:
    """`K=FILE`, FILE holding the replacing event's kind and text as a JSON object."""
    index_text, sep, file_name = value.partition("=")
    if not sep or not file_name:
        raise ContestError(f"--replace: {value!r} is not K=FILE")
    index = _index(index_text, "--replace")
    path = Path(file_name)
    try:
        body = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ContestError(f"--replace {index}: cannot read {path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise ContestError(f"--replace {index}: {path} is not JSON: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("kind"), str) or not isinstance(body.get("text"), str):
        raise ContestError(f'--replace {index}: {path} is not a replacement event: a JSON object with "kind" and '
                           f'"text" strings')  # fmt: skip
    if not body["kind"].strip() or not body["text"].strip():
        raise ContestError(f"--replace {index}: {path} is not a replacement event: its kind and text must not be empty")
    return EventChange(index, body["kind"], body["text"])


def _cited(fact: Fact) -> str:
    return "".join(f"[{i}]" for i in fact.citations)


def _whatif_json(found: Found, outcome: WhatIf, record: ContestRecord) -> dict[str, Any]:
    return {"decision_id": str(found.record.decision_id), "original_label": outcome.original_label,
            "label": outcome.label, "changed": outcome.changed, "facts_added": facts_wire(outcome.facts_added),
            "facts_removed": facts_wire(outcome.facts_removed), "calls": outcome.calls, "tokens": outcome.tokens,
            "reused_calls": record.usage["reused_calls"], "from_scratch_calls": outcome.from_scratch_calls,
            "from_scratch_tokens": outcome.from_scratch_tokens, "cites_left_out": facts_wire(outcome.cites_left_out),
            "contest_id": record.contest_id}  # fmt: skip


def _print_whatif(found: Found, outcome: WhatIf, record: ContestRecord) -> None:
    verdict = "CHANGED" if outcome.changed else "unchanged"
    lines = [f"what-if on {found.record.decision_id} ({', '.join(c.describe() for c in outcome.changes)}): "
             f"{outcome.original_label} -> {outcome.label} ({verdict})"]  # fmt: skip
    lines += [f"  + {f.text} {_cited(f)}" for f in outcome.facts_added]
    lines += [f"  - {f.text} {_cited(f)}" for f in outcome.facts_removed]
    lines += [f"  ! cites an event left out: {f.text} {_cited(f)}" for f in outcome.cites_left_out]
    lines.append(f"model calls: {outcome.calls} new ({outcome.tokens} tokens), {record.usage['reused_calls']} "
                 f"answered from the record; {outcome.from_scratch_calls} from scratch "
                 f"({outcome.from_scratch_tokens} tokens)")  # fmt: skip
    lines.append(f"recorded as contest {record.contest_id}; the decision itself is unchanged")
    for line in lines:
        _out.print(line, highlight=False, markup=False)


def _explained(found: Found) -> list[str]:
    record = found.record
    lines = [f"{record.decision_id} ({record.case.key}): {found.contested.label}"]
    for row in fact_rows(found.contested.view, found.contested.trajectory):
        lines.append(f"  {row.number}. {row.text} {''.join(f'[{i}]' for i in row.citations)}")
        for index in row.citations:
            if found.contested.trajectory.has_index(index):
                event = found.contested.trajectory.by_index(index)
                lines.append(f"       [{index}] ({event.kind}) {_excerpt(event.text)}")
    if found.contested.notice:
        lines.append(f"  notice: {found.contested.notice}")
    return lines


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _facts_json(found: Found) -> list[dict[str, Any]]:
    trajectory = found.contested.trajectory
    return [{"number": r.number, "text": r.text, "citations": list(r.citations), "citations_valid": r.citations_valid,
             "grounded": r.grounded,
             "cited_events": [{"index": i, "kind": trajectory.by_index(i).kind, "text": trajectory.by_index(i).text}
                              for i in r.citations if trajectory.has_index(i)]}
            for r in fact_rows(found.contested.view, trajectory)]  # fmt: skip


def _decisive_json(analysis: Decisive, record: ContestRecord) -> dict[str, Any]:
    return {"decisive": [list(g) for g in analysis.groups], "tested": [list(g) for g in analysis.tested],
            "calls": analysis.calls, "tokens": analysis.tokens, "complete": analysis.complete,
            "max_calls": analysis.max_calls, "from_scratch_calls": analysis.from_scratch_calls,
            "from_scratch_tokens": analysis.from_scratch_tokens, "contest_id": record.contest_id}  # fmt: skip


def _decisive_lines(analysis: Decisive, record: ContestRecord) -> list[str]:
    groups = "; ".join(" + ".join(f"[{i}]" for i in g) for g in analysis.groups)
    found = (f"decisive events (leaving them out changes {analysis.label}): {groups}" if analysis.groups
             else f"no set of events tried changes {analysis.label} when left out")  # fmt: skip
    budget = "every candidate tried" if analysis.complete else f"the call budget ({analysis.max_calls}) ran out first"
    return ["", found, f"tried {len(analysis.tested)} set(s), {budget}; model calls: {analysis.calls} new "
            f"({analysis.tokens} tokens), {analysis.from_scratch_calls} from scratch "
            f"({analysis.from_scratch_tokens} tokens)", f"recorded as contest {record.contest_id}"]  # fmt: skip


def _reasons_json(given: AdverseReasons, record: ContestRecord) -> dict[str, Any]:
    return {**reasons_outcome(given), "calls": record.usage["calls"], "contest_id": record.contest_id}
