"""A record's Kafka key against its value: they must name the same tenant, case (and event).

Consumers refuse a record whose key and value disagree (dead letter `key-mismatch`): its key decides
where it is stored and how it is found again (scans and erasure go by key, compaction by key), its
value what it says, and a record that says one thing where it is filed under another must not be
decided, folded or kept. Our producers derive every key from the value, so they cannot write one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from pipeline.core.events import SEQ_WIDTH, CaseRef, Event, InvalidEventError
from pipeline.wire.rejection import RejectedError, Rejection


def _shown(key: bytes | None) -> str:
    text = (key or b"").decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else f"{text[:80]}...")


def claimed_case(body: Mapping[str, Any]) -> CaseRef | None:
    """The case a record's clear fields name (`tenant`, `case_id`); None when they name none.

    Readable before any key opens the record: whose it claims to be decides which checks come first.
    """
    tenant, case_id = body.get("tenant"), body.get("case_id")
    if not isinstance(tenant, str) or not isinstance(case_id, str):
        return None
    try:
        return CaseRef(tenant, case_id)
    except InvalidEventError:
        return None


def claimed_event(body: Mapping[str, Any]) -> tuple[CaseRef, str] | None:
    """The case and the event key (`tenant/case/seq`) an event's clear fields name; None when they name none."""
    case, seq = claimed_case(body), body.get("seq")
    if case is None or type(seq) is not int:
        return None
    return case, f"{case.key}/{seq:0{SEQ_WIDTH}d}"


def check_event_key(key: bytes | None, event: Event) -> None:
    """Raises RejectedError(KEY_MISMATCH) unless `key` is the event's own `tenant/case/seq`."""
    check_record_key(key, event.key)


def check_record_key(key: bytes | None, event_key: str) -> None:
    """Raises RejectedError(KEY_MISMATCH) unless `key` is `event_key` (`tenant/case/seq`)."""
    if key != event_key.encode("utf-8"):
        raise RejectedError(Rejection.KEY_MISMATCH, f"key {_shown(key)} but the value is event {event_key}")


def check_case_key(key: bytes | None, case: CaseRef, what: str) -> None:
    """Raises RejectedError(KEY_MISMATCH) unless `key` is the case's `tenant/case` (a trigger's key)."""
    if key != case.key.encode("utf-8"):
        raise RejectedError(Rejection.KEY_MISMATCH, f"key {_shown(key)} but the {what} is for {case.key}")


def check_tenant_of_topic(topic_tenant: str | None, case: CaseRef) -> None:
    """Raises RejectedError(TENANT_MISMATCH) for a record on a tenant's own topic whose value names another tenant.

    With tenancy by topic the broker authorizes who may write a tenant's topics, so the topic is what
    says whose a record is; a body naming another tenant was written by a principal of the topic's
    tenant trying to act for another.
    """
    if topic_tenant is not None and case.tenant != topic_tenant:
        raise RejectedError(Rejection.TENANT_MISMATCH,
                            f"on a topic of tenant {topic_tenant!r} but the value is for {case.key}")  # fmt: skip


def check_partition(partition: int, case: CaseRef, expected: int) -> None:
    """Raises RejectedError(KEY_MISMATCH) for a record stored in another partition than its case's.

    A case's records must share one partition (murmur2 of `tenant/case`): the baseline keeps a case's
    state with the partition it owns, and a scan looks for a case in its partition only.
    """
    if partition != expected:
        raise RejectedError(
            Rejection.KEY_MISMATCH, f"stored in partition {partition}, but {case.key} belongs in partition {expected}"
        )


def names_case(key: bytes | None, value: bytes | None, case: CaseRef) -> bool:
    """Whether an events-topic record belongs to `case` by its key or by its value, whichever names it.

    What erasure removes: a record filed under the case, and one whose value says it is the case's
    however it was keyed. The value's tenant and case id are in clear even when its text is sealed.
    """
    return _names(key, value, f"{case.key}/", case.tenant, case.case_id)


def names_tenant(key: bytes | None, value: bytes | None, tenant: str) -> bool:
    """Whether an events-topic record belongs to one of `tenant`'s cases, by its key or by its value."""
    return _names(key, value, f"{tenant}/", tenant, None)


def _names(key: bytes | None, value: bytes | None, key_prefix: str, tenant: str, case_id: str | None) -> bool:
    if key is not None and key.startswith(key_prefix.encode()):
        return True
    if value is None or (case_id or tenant).encode() not in value:  # most records: no parse needed
        return False
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("tenant") == tenant and case_id in (None, body.get("case_id"))
