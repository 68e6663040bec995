"""Why input is refused (the dead-letter reason) and the decoding of raw bytes into a JSON object."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import orjson

from pipeline.core.errors import DpmError


class Rejection(StrEnum):
    """Why a trigger or event is refused; the DLQ reason and the metric label."""

    NOT_JSON = "not-json"
    SCHEMA = "schema"
    UNKNOWN_CASE = "unknown-case"
    SEQUENCE_GAP = "sequence-gap"
    CROSS_TENANT = "cross-tenant"
    OVERSIZE = "oversize"
    DEADLINE = "deadline"
    ERASED = "erased"
    SUPERSEDED = "superseded"
    KEY_MISMATCH = "key-mismatch"
    TENANT_MISMATCH = "tenant-mismatch"
    DUPLICATE = "duplicate"
    MODEL_ERROR = "model-error"
    KEY_SERVICE_UNAVAILABLE = "key-service-unavailable"
    KEY_REVOKED = "key-revoked"
    INTERNAL = "internal-error"
    UNPUBLISHABLE = "unpublishable"


# What each reason means, for operators reading the dead-letter topic (the docs' reference is built from this).
MEANINGS: dict[Rejection, str] = {
    Rejection.NOT_JSON: "the value is not a JSON object",
    Rejection.SCHEMA: "the value does not match its schema, or names a schema version this release does not know",
    Rejection.UNKNOWN_CASE: "no events found for the case the trigger names (Summ-only: no memory at its budget)",
    Rejection.SEQUENCE_GAP: "the case's events are not numbered 1..n without gaps up to the count the trigger names",
    Rejection.CROSS_TENANT: "a position the trigger names holds another tenant's or another case's event",
    Rejection.OVERSIZE: "the record, its case or an output it would produce is over a size limit",
    Rejection.DEADLINE: "the case's events could not be read within the trigger deadline",
    Rejection.ERASED: "the case's data key is destroyed: it was erased",
    Rejection.SUPERSEDED: "a named offset no longer holds its record (a later one with the same key replaced it), "
    "or Summ-only folded an event since rewritten",
    Rejection.KEY_MISMATCH: "the record's key and value name different tenants, cases or events, or it sits in "
    "another partition than its case's",
    Rejection.TENANT_MISMATCH: "with tenancy by topic, a record on one tenant's topic names another tenant",
    Rejection.DUPLICATE: "a trigger id already decided for the case",
    Rejection.MODEL_ERROR: "the model failed three times; the detail names its last failure's cause, the endpoint "
    "and the setting or command that fixes it",
    Rejection.KEY_SERVICE_UNAVAILABLE: "the tenant's key service (KMS) did not answer through every attempt; the "
    "detail names the provider. Retryable: the same trigger id, or idempotency key, sent again is decided",
    Rejection.KEY_REVOKED: "the tenant's key-encryption key is disabled or revoked at its key service (not "
    "destroyed: enabling it again opens the cases); the detail names the provider",
    Rejection.INTERNAL: "a bug met while handling this one record (kept as a dead letter instead of a crash loop)",
    Rejection.UNPUBLISHABLE: "Kafka kept refusing the record's outputs",
}


# Refusals that bind nothing: the trigger id they refused is decided when it comes again (a client sends it
# again for a request retried with the same idempotency key); every other refusal is the trigger's answer.
RETRYABLE = frozenset({Rejection.KEY_SERVICE_UNAVAILABLE})


class RejectedError(DpmError):
    """Input that must go to the dead-letter topic, with its reason."""

    def __init__(self, reason: Rejection, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type[RejectedError], tuple[Rejection, str]]:
        return type(self), (self.reason, self.detail)  # pickles across process pools


def decode_object(data: bytes | None, what: str) -> dict[str, Any]:
    """Decodes a JSON object or raises RejectedError(NOT_JSON)."""
    try:
        value = orjson.loads(data or b"")
    except orjson.JSONDecodeError as exc:
        raise RejectedError(Rejection.NOT_JSON, f"{what} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RejectedError(Rejection.NOT_JSON, f"{what} is not a JSON object")
    return value
