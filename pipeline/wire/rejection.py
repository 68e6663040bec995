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
    INTERNAL = "internal-error"
    UNPUBLISHABLE = "unpublishable"


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
