"""Canonical byte forms and their SHA-256 digests.

Canonical forms (documented in schemas/README.md):
- JSON values: UTF-8, object keys sorted, no insignificant whitespace (orjson OPT_SORT_KEYS),
  strings exactly as given (no Unicode normalization: the digest is over what was read).
- Events read: the JSON array of {"tenant","case","seq","kind","text"} in trajectory order.
- Memory view: its canonical text (MemoryView.render) in UTF-8.
- Prompt: the canonical JSON of the model request (ModelRequest.wire).
Python's str hash (PYTHONHASHSEED) never enters any of these.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import orjson

from pipeline.core.events import Event


def canonical_json(value: Any) -> bytes:  # noqa: ANN401 - any JSON value
    """The canonical JSON bytes of `value`."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def events_canonical(events: Iterable[Event]) -> bytes:
    """Canonical bytes of an ordered sequence of events."""
    return canonical_json(
        [
            {"tenant": e.case.tenant, "case": e.case.case_id, "seq": e.seq, "kind": e.kind, "text": e.text}
            for e in events
        ]
    )


def events_digest(events: Iterable[Event]) -> str:
    """Digest of the events read, in order (recorded as events_sha256)."""
    return sha256_hex(events_canonical(events))


def text_digest(text: str) -> str:
    """Digest of a text's UTF-8 bytes (a memory view's canonical text: view_sha256)."""
    return sha256_hex(text.encode("utf-8"))


def json_digest(value: Any) -> str:  # noqa: ANN401 - any JSON value
    """Digest of a JSON value's canonical bytes."""
    return sha256_hex(canonical_json(value))
