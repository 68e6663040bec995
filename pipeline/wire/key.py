"""The key record (dpm.key.v1): one case's data key, wrapped by its tenant's key-encryption key."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.core.events import CaseRef, InvalidEventError
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate

# A key-encryption key version: `v<N>`. A key record is written by whoever may write its key topic (a
# tenant's agents, with tenancy by topic), and a provider looks its KEK up by this name: a fixed form
# leaves no room for a path, a URL or another tenant's key name.
KEK_ID = re.compile(r"v[1-9][0-9]{0,8}")


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
        if not KEK_ID.fullmatch(value["kek_id"]):
            raise RejectedError(Rejection.SCHEMA, f"kek_id {value['kek_id'][:40]!r} is not a key version (v<N>)")
        try:
            case = CaseRef(value["tenant"], value["case_id"])
            wrapped = base64.b64decode(value["wrapped_b64"], validate=True)
        except (InvalidEventError, ValueError) as exc:
            raise RejectedError(Rejection.SCHEMA, f"key record: {exc}") from exc
        return cls(case, value["kid"], value["kek_id"], wrapped, value["created_ms"])

    @classmethod
    def decode(cls, data: bytes | None) -> KeyRecord:
        return cls.from_wire(decode_object(data, "key record"))
