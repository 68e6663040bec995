"""What every door (the HTTP API, the MCP tools) checks of an agent's arguments before anything is written.

One home for both doors: an argument the HTTP API refuses, the MCP tools refuse in the same words,
and before a record is written (an out-of-range budget or an unknown domain never becomes a trigger
and a dead letter). The rules are the wire schemas' (dpm.event.v1, dpm.trigger.v1), said as a field
and what it must be: a refusal never repeats the value sent, so no answer or log line holds it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from pipeline.core.domains import DOMAINS, domain_task
from pipeline.core.errors import DpmError
from pipeline.core.events import (
    ID_RULE,
    KIND_RULE,
    SEQ_WIDTH,
    TEXT_RULE,
    InvalidEventError,
    check_identifier,
    check_kind,
    check_text,
)
from pipeline.core.task import TaskSpec
from pipeline.wire.trigger import DecisionId

MIN_BUDGET_CHARS, MAX_BUDGET_CHARS = 200, 1_000_000
MAX_TASK_CHARS, MAX_LABELS, MAX_LABEL_CHARS = 10_000, 32, 64  # within dpm.trigger.v1's bounds
DOMAIN_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"  # dpm.trigger.v1's
# A trigger id is printable (dpm.trigger.v1) and, in a URL's path, holds no slash; then its architecture.
DECISION_ID_PATTERN = r"^[^\u0000-\u001f\u007f/]{1,200}:(dpm|summ)$"
_DOMAIN, _DECISION_ID = re.compile(DOMAIN_PATTERN), re.compile(DECISION_ID_PATTERN)
DEFAULT_WAIT_S = 30.0  # how long a decision is waited for when the caller does not say (at most the door's maximum)


class RefusedArgumentError(DpmError):
    """An argument a door refuses before writing anything: `field` names it, `rule` says what it must be.

    `slug` types the HTTP problem; `unprocessable` marks a well-formed request the pipeline cannot do
    (HTTP 422) rather than one that does not validate (400). Made with `of`; the message alone is the
    constructor's argument, so the error pickles like every other.
    """

    def __init__(
        self, message: str, *, field: str = "", slug: str = "bad-request", unprocessable: bool = False
    ) -> None:
        super().__init__(message)
        self.field, self.slug, self.unprocessable = field, slug, unprocessable

    @classmethod
    def of(
        cls, field: str, rule: str, *, slug: str = "bad-request", unprocessable: bool = False
    ) -> RefusedArgumentError:
        return cls(f"{field}: {rule}", field=field, slug=slug, unprocessable=unprocessable)


def case_id(value: str, field: str = "case_id") -> str:
    """The case id, if it can be one (a segment of the events' key)."""
    return _identifier(value, field)


def tenant(value: str, field: str = "tenant") -> str:
    """The tenant id, if it can be one."""
    return _identifier(value, field)


def _identifier(value: str, field: str) -> str:
    try:
        return check_identifier(value, field)
    except InvalidEventError:
        raise RefusedArgumentError.of(field, f"must be {ID_RULE}") from None


def events(items: Iterable[tuple[str, str]], field: str = "events") -> list[tuple[str, str]]:
    """(kind, text) steps to append, each checked; the field of a refused one is `events[i].kind` or `.text`."""
    return [event(kind, text, f"{field}[{i}].") for i, (kind, text) in enumerate(items)]


def event(kind: str, text: str, prefix: str = "") -> tuple[str, str]:
    """One step to append: its kind a label, its text without NUL and within a record's characters."""
    for name, value, check, rule in (("kind", kind, check_kind, KIND_RULE), ("text", text, check_text, TEXT_RULE)):
        try:
            check(value)
        except InvalidEventError:
            raise RefusedArgumentError.of(prefix + name, f"must be {rule}") from None
    return kind, text


def decision_id(value: str, field: str = "decision_id") -> DecisionId:
    """The decision id, parsed: `<trigger id>:<architecture>` as a decision request answered it."""
    if not _DECISION_ID.fullmatch(value):
        raise RefusedArgumentError.of(
            field, "is not a decision id (<trigger id>:dpm or :summ, as a request answered it)"
        )
    return DecisionId.parse(value)


def budget(chars: int, field: str = "budget_chars") -> int:
    """The memory budget, if within what a decision may be asked with."""
    if isinstance(chars, bool) or not MIN_BUDGET_CHARS <= chars <= MAX_BUDGET_CHARS:
        raise RefusedArgumentError.of(field, f"must be {MIN_BUDGET_CHARS}..{MAX_BUDGET_CHARS}",
                                   slug="budget-out-of-range", unprocessable=True)  # fmt: skip
    return chars


MAX_SEQ = 10**SEQ_WIDTH - 1  # dpm.event.v1's seq maximum


def expected_seq(value: int | None, field: str = "expected_seq") -> int | None:
    """The case's last seq an append expects (0: no events yet), if it can be one; None expects nothing."""
    if value is not None and (isinstance(value, bool) or not 0 <= value <= MAX_SEQ):
        raise RefusedArgumentError.of(field, f"must be a case's last seq, 0 to {MAX_SEQ}")
    return value


def if_match_seq(header: str | None, field: str = "If-Match") -> int | None:
    """The case's last seq an `If-Match` header names: one strong entity tag `"<seq>"`, as appends answer in ETag.

    A weak tag never matches (RFC 9110 compares If-Match strongly), so it is refused rather than
    answered 412 forever; `*` and lists of tags are refused too: an append names the one seq it saw.
    """
    if header is None:
        return None
    tag = header.strip()
    digits = tag[1:-1] if len(tag) >= 3 and tag[0] == tag[-1] == '"' else ""
    if not digits.isascii() or not digits.isdigit():
        raise RefusedArgumentError.of(field, 'must be one strong entity tag "<seq>": the case\'s last seq, as the '
                                             "ETag of an append answered it")  # fmt: skip
    return expected_seq(int(digits), field)


def wait_s(value: float | None, most_s: float, field: str = "wait_s") -> float:
    """Seconds to wait for a decision: 0 up to the door's maximum (DPM_API_MAX_WAIT_S), never clamped.

    None (not given) is DEFAULT_WAIT_S, or the maximum when that is lower.
    """
    if value is None:
        return min(DEFAULT_WAIT_S, most_s)
    if isinstance(value, bool) or not math.isfinite(value) or not 0 <= value <= most_s:
        raise RefusedArgumentError.of(field, f"must be a number of seconds from 0 to {most_s:g} (DPM_API_MAX_WAIT_S)")
    return float(value)


def standing_task(domain: str, field: str = "domain") -> TaskSpec:
    """The domain's standing task; an unknown domain is refused (a task given whole serves any other)."""
    if domain not in DOMAINS:
        raise RefusedArgumentError.of(field, f"is not a known domain (known: {', '.join(sorted(DOMAINS))}); give the "
                                   "task whole for another", slug="unknown-domain", unprocessable=True)  # fmt: skip
    return domain_task(domain)


def whole_task(domain: str, text: str, label_space: Sequence[str], field: str = "task") -> TaskSpec:
    """A task given whole, checked as dpm.trigger.v1 will check it."""
    if not _DOMAIN.fullmatch(domain):
        raise RefusedArgumentError.of(f"{field}.domain", "must be 1 to 64 of a-z, 0-9 and _, starting with a letter")
    if not text.strip() or len(text) > MAX_TASK_CHARS:
        raise RefusedArgumentError.of(f"{field}.task", f"must be 1 to {MAX_TASK_CHARS:,} characters, not only spaces")
    if not 1 <= len(label_space) <= MAX_LABELS or any(not 1 <= len(label) <= MAX_LABEL_CHARS for label in label_space):
        raise RefusedArgumentError.of(f"{field}.label_space", f"must be 1 to {MAX_LABELS} labels of 1 to "
                                   f"{MAX_LABEL_CHARS} characters")  # fmt: skip
    if len(set(label_space)) != len(label_space):
        raise RefusedArgumentError.of(f"{field}.label_space", "must name each label once")
    return TaskSpec(domain, text, tuple(label_space))
