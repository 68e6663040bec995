"""The segment view record (dpm.segment.v1): one view of a long case's segment tree, kept for reuse."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from pipeline.core.events import CaseRef
from pipeline.core.hashing import text_digest
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import CaseCipher, opened_record, seal_body


@dataclass(frozen=True)
class SegmentViewRecord:
    """A view stored under its segment key (core/segments.py), for the case it belongs to."""

    case: CaseRef
    segment_key: str
    view: str

    @property
    def record_key(self) -> bytes:
        """`tenant/case/segment key`: erasure finds a case's views by this prefix."""
        return f"{self.case.key}/{self.segment_key}".encode()

    def encode(self, cipher: CaseCipher | None) -> bytes:
        body = {"schema": SchemaId.SEGMENT.value, "tenant": self.case.tenant, "case_id": self.case.case_id,
                "segment_key": self.segment_key, "view_sha256": text_digest(self.view), "view": self.view}  # fmt: skip
        return orjson.dumps(seal_body(body, cipher))

    @classmethod
    def decode(cls, data: bytes | None, cipher: CaseCipher | None) -> SegmentViewRecord:
        """The record, opened and checked against its digest; raises RejectedError (CaseErasedError once erased)."""
        body = opened_record(data, cipher, SchemaId.SEGMENT, "segment view")
        if text_digest(body["view"]) != body["view_sha256"]:
            raise RejectedError(Rejection.SCHEMA, "the segment view does not match its digest")
        return cls(CaseRef(body["tenant"], body["case_id"]), body["segment_key"], body["view"])


def case_prefix(case: CaseRef) -> bytes:
    """The start of every segment view record key of `case`."""
    return f"{case.key}/".encode()
