"""Parses a model's text into a MemoryView without ever raising.

Models wrap sections in markdown, number their bullets, cite as `[3]`, `[3, 7]`, `[3-5]` or
`(event 3)`; servers that enforce a JSON schema answer with the structured shape instead
(pipeline.core.structured). Everything recognizable is kept; what is not is reported in
`problems`, so a malformed, partial or runaway output is a recorded parse failure, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipeline.core.structured import looks_structured, read_object, salvage_facts, salvage_strings
from pipeline.core.view import SECTION_HEADER, UNKNOWN, Fact, MemoryView

_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+")
_CITATION = re.compile(
    r"\[\s*(?:events?\s*|e)?(\d{1,6}(?:\s*[-\u2013,;]\s*(?:e\s*)?\d{1,6})*)\s*\]|\(\s*events?\s+(\d{1,6})\s*\)", re.I
)
_MAX_RANGE = 64
_ORDER = ("facts", "reasoning", "compliance")


@dataclass(frozen=True)
class ParseOutcome:
    """The parsed view and every problem met; `ok` is False for a parse failure."""

    view: MemoryView
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def _indices(spec: str) -> list[int]:
    found: list[int] = []
    for part in re.split(r"\s*[,;]\s*", spec):
        bounds = [int(x) for x in re.findall(r"\d+", part)]
        if len(bounds) == 2 and bounds[0] <= bounds[1] and bounds[1] - bounds[0] < _MAX_RANGE:
            found.extend(range(bounds[0], bounds[1] + 1))
        else:
            found.extend(bounds)
    return found


def split_citations(line: str) -> tuple[str, tuple[int, ...]]:
    """Removes citation markers from `line`; returns the text and the cited indices in order, deduplicated."""
    cited: list[int] = []
    for match in _CITATION.finditer(line):
        cited.extend(_indices(match.group(1) or match.group(2)))
    text = re.sub(r"\s{2,}", " ", _CITATION.sub("", line)).strip()
    return text, tuple(dict.fromkeys(cited))


def _section_name(raw: str) -> str:
    return raw.lower().split()[0]


def _strip_fences(text: str) -> str:
    return "\n".join(
        line
        for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if not line.strip().startswith("```")
    )


def _collect(text: str) -> tuple[dict[str, list[str]], list[str]]:
    sections: dict[str, list[str]] = {}
    seen: list[str] = []
    current: str | None = None
    for line in _strip_fences(text).split("\n"):
        header = SECTION_HEADER.match(line)
        if header:
            current = _section_name(header.group("name"))
            seen.append(current)
            sections.setdefault(current, [])
            line = header.group("rest") or ""  # noqa: PLW2901 - content may follow the header on its line
        if current is not None and line.strip():
            sections[current].append(line.strip())
    return sections, seen


def _clean(lines: list[str]) -> list[str]:
    body = [_BULLET.sub("", line).strip() for line in lines]
    return [line for line in body if line and line.lower().strip(" .") != UNKNOWN]


def _fact(text: str, cited: tuple[int, ...] = ()) -> Fact:
    """A fact from its text (which may carry its own citation markers) and listed citations."""
    body, inline = split_citations(_BULLET.sub("", text).strip())
    return Fact(body, tuple(dict.fromkeys((*cited, *inline))))


def _structured_facts(raw: Any, problems: list[str]) -> list[Fact]:  # noqa: ANN401 - decoded JSON
    if not isinstance(raw, list):
        problems.append("facts is not a list")
        return []
    facts = []
    for item in raw:
        if isinstance(item, str):
            facts.append(_fact(item))
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            cites = item.get("citations")
            cites = cites if isinstance(cites, list) else [cites]
            numbers = [c for c in cites if isinstance(c, int) and not isinstance(c, bool)]
            if len(numbers) != len(cites):
                problems.append("a fact's citations are not a list of event numbers")
            facts.append(_fact(item["text"], tuple(c for c in numbers if c > 0)))
        else:
            problems.append("a fact is neither text nor {text, citations}")
    return facts


def _structured_lines(value: dict[str, Any], keys: tuple[str, ...], problems: list[str]) -> list[str]:
    raw = next((value[k] for k in keys if k in value), None)
    if isinstance(raw, str):
        raw = raw.split("\n")
    if not isinstance(raw, list):
        problems.append(f"missing section {keys[0].upper()}")
        return []
    return _clean([line for line in raw if isinstance(line, str)])


def _parse_structured(text: str) -> ParseOutcome:
    value, problem = read_object(_strip_fences(text))
    problems: list[str] = []
    if value is None:  # keep every item that was written out in full
        problems.append(str(problem))
        facts = [_fact(t, cited) for t, cited in salvage_facts(text)]
        reasoning = _clean(salvage_strings(text, "reasoning"))
        compliance = _clean(salvage_strings(text, "compliance_notes") or salvage_strings(text, "compliance"))
    else:
        facts = _structured_facts(value.get("facts", []), problems) if "facts" in value else []
        if "facts" not in value:
            problems.append("missing section FACTS")
        reasoning = _structured_lines(value, ("reasoning",), problems)
        compliance = _structured_lines(value, ("compliance_notes", "compliance"), problems)
    view = MemoryView(tuple(f for f in facts if f.text), tuple(reasoning), tuple(compliance))
    return ParseOutcome(view, tuple(problems))


def parse_view(text: str) -> ParseOutcome:
    """Parses model output (section text or the structured JSON shape) into a MemoryView; never raises."""
    if looks_structured(_strip_fences(text)):
        return _parse_structured(text)
    try:
        sections, seen = _collect(text)
    except (ValueError, RecursionError) as exc:  # defensive: regexes on adversarial input
        return ParseOutcome(MemoryView((), (), ()), (f"unparseable output: {exc}",))
    problems = [f"missing section {name.upper()}" for name in _ORDER if name not in sections]
    first_seen = list(dict.fromkeys(seen))
    if first_seen != sorted(first_seen, key=_ORDER.index):
        problems.append("sections out of order")
    if len(seen) != len(set(seen)):
        problems.append("a section appears more than once")
    facts = tuple(Fact(*split_citations(line)) for line in _clean(sections.get("facts", [])))
    view = MemoryView(
        facts=tuple(f for f in facts if f.text),
        reasoning=tuple(_clean(sections.get("reasoning", []))),
        compliance=tuple(_clean(sections.get("compliance", []))),
    )
    return ParseOutcome(view, tuple(problems))
