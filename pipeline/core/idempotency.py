"""Idempotency keys as draft-ietf-httpapi-idempotency-key-header has them: a key names one request, never another.

A caller that retries a write sends the same key, and gets the first write's answer instead of a
second write. The key is stored with a fingerprint of the request it came with, so the same key
sent with a different request is refused (nothing written) rather than answered with the first
request's result: an agent told "written" must find its own steps in the log, not another call's.
Every door (the client library, the HTTP API, the MCP tools) checks keys and fingerprints here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

import orjson

from pipeline.core.errors import DpmError
from pipeline.core.task import TaskSpec

MAX_KEY_LENGTH = 200
# Visible ASCII (RFC 5234 VCHAR, 0x21-0x7E): what every HTTP client can send in a header unchanged,
# and what a log line can hold without escaping.
_VISIBLE = frozenset(chr(c) for c in range(0x21, 0x7F))
# An RFC 8941 sf-string: printable ASCII between quotes, a quote or a backslash escaped by a backslash.
_SF_STRING = re.compile(r'"((?:[\x20-\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
_SF_ESCAPE = re.compile(r'\\(["\\])')


class InvalidIdempotencyKeyError(DpmError, ValueError):
    """An idempotency key that is empty, too long, or holds other than visible ASCII characters."""


def check_idempotency_key(key: str) -> str:
    """The key when it is 1 to 200 visible ASCII characters; else InvalidIdempotencyKeyError (naming no value)."""
    if not key:
        raise InvalidIdempotencyKeyError("an idempotency key must not be empty: send none, or 1 to 200 characters")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKeyError(f"an idempotency key is at most {MAX_KEY_LENGTH} characters")
    if not _VISIBLE.issuperset(key):
        raise InvalidIdempotencyKeyError("an idempotency key holds visible ASCII characters only (no spaces)")
    return key


def header_key(value: str) -> str:
    """The key an `Idempotency-Key` header names: the draft's quoted string (RFC 8941), or the bare value.

    Payment APIs take the bare value; the draft writes `"key"`. Both name the same key here.
    """
    if not value.startswith('"'):
        return check_idempotency_key(value)
    match = _SF_STRING.fullmatch(value)
    if match is None:
        raise InvalidIdempotencyKeyError("the Idempotency-Key header is not a valid quoted string (RFC 8941)")
    return check_idempotency_key(_SF_ESCAPE.sub(r"\1", match.group(1)))


def _digest(value: object) -> str:
    return hashlib.sha256(orjson.dumps(value)).hexdigest()


def append_fingerprint(items: Sequence[tuple[str, str]]) -> str:
    """The fingerprint of an append: its events' kinds and texts, in order."""
    return _digest([[kind, text] for kind, text in items])


def decision_fingerprint(task: TaskSpec, budget_chars: int, architectures: Iterable[str]) -> str:
    """The fingerprint of a decision request: its task (domain, text, labels), budget and architectures."""
    return _digest([task.wire(), budget_chars, [str(a) for a in architectures]])
