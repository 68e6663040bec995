"""The decision step's output: a label within the label space, a rationale and a notice."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.structured import looks_structured, read_object, salvage_string

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


def _text_answer(text: str) -> tuple[str | None, str, str, list[str]]:
    fields = _fields(text)
    raw_label = fields["DECISION"][0] if "DECISION" in fields else None
    return raw_label, " ".join(fields.get("RATIONALE", [])), " ".join(fields.get("NOTICE", [])), []


def _structured_answer(text: str) -> tuple[str | None, str, str, list[str]]:
    value, problem = read_object(text.strip().strip("`").removeprefix("json"))
    if value is None:  # a cut-off answer: keep the fields that were written out in full
        fields = {k: salvage_string(text, k) for k in ("decision", "rationale", "notice")}
        return fields["decision"], fields["rationale"] or "", fields["notice"] or "", [str(problem)]
    strings = {k: v if isinstance(v, str) else None for k, v in value.items()}
    problems = [f"{k} is not text" for k in ("decision", "rationale", "notice") if k in value and strings[k] is None]
    return strings.get("decision"), strings.get("rationale") or "", strings.get("notice") or "", problems


def parse_decision(text: str, label_space: tuple[str, ...]) -> Decision:
    """Parses a decision answer (field lines or the structured JSON shape); never raises.

    Out-of-space or missing labels are recorded problems (the label is then None), never retried.
    """
    answer = _structured_answer if looks_structured(text.strip().strip("`").removeprefix("json")) else _text_answer
    raw_label, rationale, notice, problems = answer(text)
    label = match_label(raw_label, label_space) if raw_label is not None else None
    if raw_label is None:
        problems.append("no DECISION line")
    elif label is None:
        problems.append(f"decision {raw_label[:60]!r} is not in the label space {list(label_space)}")
    rationale, notice = rationale.strip(), notice.strip() or NO_NOTICE
    if not rationale:
        problems.append("no RATIONALE")
    if label is not None and is_negative(label) and notice.lower().strip(" .") == NO_NOTICE:
        problems.append("a negative decision without a notice of reasons")
    return Decision(label, rationale, notice, tuple(problems))


def render_decision(label: str, rationale: str, notice: str) -> str:
    """The answer layout the decision prompt asks for (used by the offline backend)."""
    return f"DECISION: {label}\nRATIONALE: {rationale}\nNOTICE: {notice}"
