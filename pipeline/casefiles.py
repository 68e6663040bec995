"""Reads case files (schemas/case.v1.json) and JSON-lines event files, all-or-nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from pipeline.core.case import Case, case_from_dict, case_to_dict
from pipeline.core.errors import DpmError
from pipeline.core.events import Event
from pipeline.schemas import SchemaError, validate


class CaseFileError(DpmError):
    """A case or event file is unreadable or invalid; the message names the file (and line)."""


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
        validate("case.v1", raw)
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
            value = {"schema": "dpm.event.v1", **orjson.loads(line)}
            validate("event.v1", value)
            events.append(Event.from_wire(value))
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CaseFileError(f"{path}:{number}: not a JSON object: {exc}") from exc
        except (SchemaError, DpmError) as exc:
            raise CaseFileError(f"{path}:{number}: {exc}") from exc
    if not events:
        raise CaseFileError(f"{path}: no events")
    return events
