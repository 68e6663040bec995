"""What the key topic holds under `tenant/case`: the case's data key, wrapped (dpm.key.v1), or its erasure.

An erasure is two records: a tombstone, which compaction uses to remove the wrapped key and then, after
`delete.retention.ms`, removes too; and right after it an erased marker (dpm.key_erased.v1), which as
the key's latest record is kept by compaction for good, so the fact of the erasure outlives the
tombstone. The marker holds the tenant, the case id and the time, nothing of any key.
"""

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


@dataclass(frozen=True)
class KeyErased:
    """The erased marker: the case was erased at `erased_ms`; its data key is gone and none is written again."""

    case: CaseRef
    erased_ms: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "schema": SchemaId.KEY_ERASED.value,
            "tenant": self.case.tenant,
            "case_id": self.case.case_id,
            "erased_ms": self.erased_ms,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> KeyErased:
        try:
            validate(SchemaId.KEY_ERASED, value)
            case = CaseRef(value["tenant"], value["case_id"])
        except (SchemaError, InvalidEventError) as exc:
            raise RejectedError(Rejection.SCHEMA, f"erased marker: {exc}") from exc
        return cls(case, value["erased_ms"])


KeyValue = KeyRecord | KeyErased  # a key topic record's value (a tombstone has none)


def decode_key_value(data: bytes | None) -> KeyValue:
    """A key topic value: the wrapped key or the erased marker, by its `schema`; RejectedError for anything else."""
    value = decode_object(data, "key record")
    if value.get("schema") == SchemaId.KEY_ERASED.value:
        return KeyErased.from_wire(value)
    return KeyRecord.from_wire(value)


def erases(value: bytes | None) -> bool:
    """Whether a key topic value says its case is erased: a tombstone (None) or an erased marker.

    A value that is neither a marker nor readable is not taken for an erasure (nor for a key).
    """
    if value is None:
        return True
    try:
        return isinstance(decode_key_value(value), KeyErased)
    except RejectedError:
        return False
