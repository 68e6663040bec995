"""Helpers for tests that run the pipeline against the real broker: topics, processes, outputs."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.kafka.admin import admin_client
from pipeline.kafka.topics import TopicNames, ensure_topics, pipeline_topics

SMALL_CASES = GenerationSpec(per_domain=2, events=(24, 30), chars=(6_000, 7_500), tenant="e2e")


def small_cases(per_domain: int = 2, tenant: str = "e2e") -> list[Case]:
    """Short generated cases (24 to 30 events) so end-to-end tests stay quick."""
    return generate_cases(GenerationSpec(per_domain=per_domain, events=(24, 30), chars=(6_000, 7_500), tenant=tenant))


def create_topics(config: dict[str, str], names: TopicNames, partitions: int = 3) -> None:
    ensure_topics(admin_client(config), pipeline_topics(names, partitions), replication_factor=1)


def worker_env(bootstrap: str, names: TopicNames, home: Path) -> dict[str, str]:
    """Environment for `python -m pipeline ...` children: fast failure detection for tests."""
    return {
        **os.environ,
        "DPM_BOOTSTRAP": bootstrap,
        "DPM_TOPIC_PREFIX": names.prefix,
        "DPM_HOME": str(home),
        "DPM_SESSION_TIMEOUT_MS": "6000",
        "DPM_TRANSACTION_TIMEOUT_MS": "10000",
        "DPM_BACKEND": "extractive",
        "DPM_METRICS_PORT": "-1",
    }
