"""The memory view: facts citing events, reasoning, compliance notes; its canonical text form.

Canonical text (what is hashed, measured against the budget and shown to the decision step):

    FACTS:
    - <fact text> [i][j]
    REASONING:
    <one or more lines; a line that would read as a section header is written as a bullet>
    COMPLIANCE NOTES:
    - <note>

Sections always appear, in this order; an empty section holds the single line `unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FACTS_HEADER = "FACTS:"
REASONING_HEADER = "REASONING:"
COMPLIANCE_HEADER = "COMPLIANCE NOTES:"
UNKNOWN = "unknown"

# A header is the section name alone on its line, or followed by a colon and optional content;
# models add markdown around it, so `## Reasoning` and `**FACTS:**` count too.
SECTION_HEADER = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*|__)?\s*(?P<name>facts|reasoning|compliance(?:\s+notes)?)\s*(?:\*\*|__)?\s*"
    r"(?::\s*(?:\*\*|__)?\s*(?P<rest>.*)|$)",
    re.IGNORECASE,
)


def _reasoning_line(line: str) -> str:
    """Reasoning lines are bare; one that reads as a header gets a bullet, which parsing strips."""
    return f"- {line}" if SECTION_HEADER.match(line) else line


def reasoning_line(line: str) -> str:
    """A reasoning line as the canonical text writes it."""
    return _reasoning_line(line).rstrip()


def compliance_line(note: str) -> str:
    """A compliance note as the canonical text writes it."""
    return f"- {note}".rstrip()


@dataclass(frozen=True)
class Fact:
    """A verifiable claim and the 1-based indices of the events it comes from."""

    text: str
    citations: tuple[int, ...] = ()

    def render(self) -> str:
        cites = "".join(f"[{i}]" for i in self.citations)
        return f"- {self.text} {cites}".rstrip()


@dataclass(frozen=True)
class MemoryView:
    """The three-section view M = pi(E, T, B)."""

    facts: tuple[Fact, ...]
    reasoning: tuple[str, ...]
    compliance: tuple[str, ...]

    def render(self) -> str:
        """The canonical text form (LF line ends, no trailing spaces, no final newline)."""
        lines = [FACTS_HEADER]
        lines += [f.render() for f in self.facts] or [UNKNOWN]
        lines.append(REASONING_HEADER)
        lines += [reasoning_line(line) for line in self.reasoning] or [UNKNOWN]
        lines.append(COMPLIANCE_HEADER)
        lines += [compliance_line(note) for note in self.compliance] or [UNKNOWN]
        return "\n".join(line.rstrip() for line in lines)

    @property
    def char_length(self) -> int:
        return len(self.render())

    @property
    def cited_indices(self) -> tuple[int, ...]:
        return tuple(i for f in self.facts for i in f.citations)


EMPTY_VIEW = MemoryView((), (), ())


def fit_to_budget(view: MemoryView, budget_chars: int) -> tuple[MemoryView, int]:
    """Shrinks `view` until its canonical text fits `budget_chars`; returns it and the characters cut.

    Repeatedly drops the last line of the section that is longest in characters (producers put
    the most relevant lines first). Deterministic, so enforcement never breaks replay; terminates
    because the empty view (about 50 characters) fits every valid budget.
    """
    facts, reasoning, compliance = list(view.facts), list(view.reasoning), list(view.compliance)
    fitted = view
    while fitted.char_length > budget_chars and (facts or reasoning or compliance):
        sizes = (sum(len(f.render()) for f in facts), sum(map(len, reasoning)), sum(map(len, compliance)))
        (facts, reasoning, compliance)[sizes.index(max(sizes))].pop()
        fitted = MemoryView(tuple(facts), tuple(reasoning), tuple(compliance))
    return fitted, view.char_length - fitted.char_length
