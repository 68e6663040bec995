"""Helpers for tests that run the pipeline against the real broker: cases, topics, child environments."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import orjson

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.services.cluster import child_env


def small_cases(per_domain: int = 2, tenant: str = "e2e") -> list[Case]:
    """Short generated cases (24 to 30 events) so end-to-end tests stay quick."""
    return generate_cases(GenerationSpec(per_domain=per_domain, events=(24, 30), chars=(6_000, 7_500), tenant=tenant))


def create_topics(config: dict[str, str], names: TopicNames, partitions: int = 3) -> None:
    create_pipeline_topics(config, names, partitions, replication=1)


def worker_env(bootstrap: str, names: TopicNames, home: Path) -> dict[str, str]:
    """Environment for `python -m pipeline ...` children: fast failure detection for tests."""
    return child_env(bootstrap, names.prefix, DPM_HOME=str(home), DPM_SESSION_TIMEOUT_MS="6000",
                     DPM_TRANSACTION_TIMEOUT_MS="10000", DPM_BACKEND="extractive")  # fmt: skip


def committed_records(config: dict[str, str], topic: str, at_least: int, timeout_s: float = 30.0) -> list[RawRecord]:
    """The topic's committed records, once at least `at_least` are readable or the time is up.

    A transaction's records become readable (read_committed) only once the broker has written its
    markers, a moment after commit_transaction returned: a read made at once can miss them.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        records = list(read_topic(config, topic))
        if len(records) >= at_least or time.monotonic() >= deadline:
            return records
        time.sleep(0.2)


def await_dead_letters(
    config: dict[str, str], names: TopicNames, count: int, timeout_s: float
) -> list[tuple[str, str]]:
    """(reason, trigger id) of the dead letters, once `count` are there or the time is up."""
    letters = [orjson.loads(r.value or b"") for r in committed_records(config, names.dlq, count, timeout_s)]
    originals = [orjson.loads(base64.b64decode(letter["original_value_b64"])) for letter in letters]
    return [(letter["reason"], original["trigger_id"]) for letter, original in zip(letters, originals, strict=True)]
