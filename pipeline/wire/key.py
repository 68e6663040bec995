"""The key record (dpm.key.v1): one case's data key, wrapped by its tenant's key-encryption key."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.events import CaseRef
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate


@dataclass(frozen=True)
class KeyRecord:
    """What `dpm.keys` holds under `tenant/case`: never the data key in clear."""

    case: CaseRef
    kid: str
    kek_id: str
    wrapped: bytes
    created_ms: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.KEY.value,
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "kid": self.kid,
            "kek_id": self.kek_id,
            "wrapped_b64": base64.b64encode(self.wrapped).decode("ascii"),
            "created_ms": self.created_ms,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> KeyRecord:
        try:
            validate(SchemaId.KEY, value)
        except SchemaError as exc:
            raise RejectedError(Rejection.SCHEMA, str(exc)) from exc
        case = CaseRef(value["tenant"], value["case_id"])
        return cls(case, value["kid"], value["kek_id"], base64.b64decode(value["wrapped_b64"]), value["created_ms"])

    @classmethod
    def decode(cls, data: bytes | None) -> KeyRecord:
        return cls.from_wire(decode_object(data, "key record"))
