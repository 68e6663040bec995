"""Reads case files (schemas/case.v1.json) and JSON-lines event files, all-or-nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from pipeline.core.case import DEFAULT_TENANT, Case, RequiredAnchor
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, Event, InvalidEventError, Trajectory
from pipeline.core.task import TaskSpec
from pipeline.wire.event import EventRecord
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate


class CaseFileError(DpmError):
    """A case or event file is unreadable or invalid; the message names the file (and line)."""


def case_from_dict(raw: Mapping[str, Any], tenant: str | None = None) -> Case:
    """Builds a Case from a schema-valid case object; unknown extra fields are ignored.

    Events are ordered by seq; raises InvalidEventError for duplicate or missing sequence numbers.
    """
    ref = CaseRef(tenant or raw.get("tenant") or DEFAULT_TENANT, raw["case_id"])
    events = sorted(raw["events"], key=lambda e: e["seq"])
    seqs = [int(e["seq"]) for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        shown = f"{seqs[0]}..{seqs[-1]}" if seqs else "none"
        raise InvalidEventError(f"case {ref.key}: events must be numbered 1..{len(seqs)} without gaps, got {shown}")
    trajectory = Trajectory(ref, tuple(Event(ref, int(e["seq"]), str(e["kind"]), str(e["text"])) for e in events))
    label_space = tuple(raw["label_space"])
    if raw["label"] not in label_space:
        raise InvalidEventError(f"case {ref.key}: label {raw['label']!r} is not in its label space {list(label_space)}")
    return Case(
        trajectory=trajectory,
        task=TaskSpec(raw["domain"], raw["task"], label_space),
        label=raw["label"],
        required_anchors=tuple(RequiredAnchor(a["key"], a["value"]) for a in raw["required_anchors"]),
        compliance_provisions=tuple(raw["compliance_provisions"]),
        reasoning_points=tuple(raw["reasoning_points"]),
    )


def case_to_dict(case: Case) -> dict[str, Any]:
    """The v1 wire form of a case."""
    return {
        "schema": SchemaId.CASE.value,
        "case_id": case.ref.case_id,
        "domain": case.task.domain,
        "tenant": case.ref.tenant,
        "task": case.task.task,
        "label": case.label,
        "label_space": list(case.task.label_space),
        "events": [{"seq": e.seq, "kind": e.kind, "text": e.text} for e in case.trajectory.events],
        "required_anchors": [{"key": a.key, "value": a.value} for a in case.required_anchors],
        "compliance_provisions": list(case.compliance_provisions),
        "reasoning_points": list(case.reasoning_points),
    }


def _case_paths(path: Path) -> list[Path]:
    if path.is_dir():
        paths = sorted(p for p in path.glob("*.json") if p.is_file())
        if not paths:
            raise CaseFileError(f"{path}: no *.json case files")
        return paths
    if not path.exists():
        raise CaseFileError(f"{path}: no such file or folder")
    return [path]


def load_case(path: Path, tenant: str | None = None) -> Case:
    """One validated case; unknown extra fields are ignored."""
    try:
        raw: Any = orjson.loads(path.read_bytes())
        validate(SchemaId.CASE, raw)
        return case_from_dict(raw, tenant)
    except OSError as exc:
        raise CaseFileError(f"{path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise CaseFileError(f"{path}: not JSON: {exc}") from exc
    except (SchemaError, DpmError) as exc:
        raise CaseFileError(f"{path}: {exc}") from exc


def load_cases(path: Path, tenant: str | None = None) -> list[Case]:
    """Every case under `path` (a file or a folder of *.json); any bad file fails the whole load."""
    cases = [load_case(p, tenant) for p in _case_paths(path)]
    seen: set[str] = set()
    for case in cases:
        if case.ref.key in seen:
            raise CaseFileError(f"{path}: case {case.ref.key} appears twice")
        seen.add(case.ref.key)
    return cases


def write_case(case: Case, folder: Path) -> Path:
    """Writes a case as `<case_id>.json` (pretty, stable key order)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.ref.case_id}.json"
    path.write_bytes(orjson.dumps(case_to_dict(case), option=orjson.OPT_INDENT_2) + b"\n")
    return path


def load_event_lines(path: Path) -> list[Event]:
    """Events from a JSON-lines file of dpm.event.v1 objects (`schema` may be omitted)."""
    events: list[Event] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise CaseFileError(f"{path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(EventRecord.from_wire({"schema": SchemaId.EVENT.value, **orjson.loads(line)}).event)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CaseFileError(f"{path}:{number}: not a JSON object: {exc}") from exc
        except RejectedError as exc:
            raise CaseFileError(f"{path}:{number}: {exc.detail}") from exc
        except DpmError as exc:
            raise CaseFileError(f"{path}:{number}: {exc}") from exc
    if not events:
        raise CaseFileError(f"{path}: no events")
    return events
