"""The decision step's output: a label within the label space, a rationale and a notice."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*(?:\*\*)?(DECISION|RATIONALE|NOTICE)(?:\*\*)?\s*:\s*(?:\*\*)?\s*(.*)$", re.IGNORECASE)
_NEGATIVE_WORDS = ("DENY", "DENIED", "DECLINE", "REJECT", "ADJUST", "ADVERSE")
NO_NOTICE = "none"


@dataclass(frozen=True)
class Decision:
    """A decision as parsed; `label` is None when the output named no label of the space."""

    label: str | None
    rationale: str
    notice: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.label is not None and not self.problems


def is_negative(label: str) -> bool:
    """Negative decisions (denials, adverse actions, adjustments) require a notice of reasons."""
    return any(word in label.upper() for word in _NEGATIVE_WORDS)


def _normalize_label(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip("*`\"'.").strip()).upper()


def match_label(raw: str, label_space: tuple[str, ...]) -> str | None:
    """The label of the space that `raw` names exactly (case and spacing aside), else None.

    Exact, not a substring test: "PAY" never matches "PARTIAL PAY".
    """
    wanted = _normalize_label(raw)
    matches = [label for label in label_space if _normalize_label(label) == wanted]
    return matches[0] if len(matches) == 1 else None


def _fields(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        match = _FIELD.match(line)
        if match and match.group(1).upper() not in fields:
            current = match.group(1).upper()
            fields[current] = [match.group(2).strip()]
        elif current is not None and line.strip():
            fields[current].append(line.strip())
    return fields


def parse_decision(text: str, label_space: tuple[str, ...]) -> Decision:
    """Parses a decision answer; never raises. Out-of-space or missing labels are recorded problems."""
    fields = _fields(text)
    problems: list[str] = []
    raw_label = fields.get("DECISION", [""])[0]
    label = match_label(raw_label, label_space)
    if "DECISION" not in fields:
        problems.append("no DECISION line")
    elif label is None:
        problems.append(f"decision {raw_label[:60]!r} is not in the label space {list(label_space)}")
    rationale = " ".join(fields.get("RATIONALE", [])).strip()
    notice = " ".join(fields.get("NOTICE", [])).strip() or NO_NOTICE
    if not rationale:
        problems.append("no RATIONALE")
    if label is not None and is_negative(label) and notice.lower().strip(" .") == NO_NOTICE:
        problems.append("a negative decision without a notice of reasons")
    return Decision(label, rationale, notice, tuple(problems))


def render_decision(label: str, rationale: str, notice: str) -> str:
    """The answer layout the decision prompt asks for (used by the offline backend)."""
    return f"DECISION: {label}\nRATIONALE: {rationale}\nNOTICE: {notice}"
