"""The schema id of every wire form; each names its JSON Schema file in schemas/."""

from __future__ import annotations

from enum import StrEnum


class SchemaId(StrEnum):
    """One constant per published schema; the value is the `schema` field every record carries."""

    CASE = "dpm.case.v1"
    EVENT = "dpm.event.v1"
    TRIGGER = "dpm.trigger.v1"
    VIEW = "dpm.view.v1"
    DECISION = "dpm.decision.v2"
    DECISION_V1 = "dpm.decision.v1"  # read, upcast to v2 (wire/decision.py); never written since 0.2.0
    AUDIT = "dpm.audit.v1"
    DEAD_LETTER = "dpm.dlq.v2"
    DEAD_LETTER_V1 = "dpm.dlq.v1"  # read as is (its content in clear); never written since 0.2.0
    KEY = "dpm.key.v1"
    KEY_ERASED = "dpm.key_erased.v1"  # on the key topic after a case's tombstone: the erasure, kept by compaction
    LEDGER = "dpm.ledger.v1"
    SEGMENT = "dpm.segment.v1"
    LAYOUT = "dpm.layout.v1"
    CONTEST = "dpm.contest.v2"
    CONTEST_V1 = "dpm.contest.v1"  # read as v2 (wire/contest.py): it kept each request whole; never written since
    CONTEST_PART = "dpm.contest_part.v1"

    @property
    def file_stem(self) -> str:
        """The schema file's name without `.json`: `dpm.event.v1` lives in `schemas/event.v1.json`."""
        return self.value.removeprefix("dpm.")
