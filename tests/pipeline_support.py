"""Helpers for tests that run the pipeline against the real broker: topics, processes, outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.core.case import Case
from pipeline.kafka.admin import admin_client
from pipeline.kafka.topics import TopicNames, ensure_topics, pipeline_topics
from pipeline.outputs_index import PublishedOutputs, load_outputs

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
    }


@contextmanager
def processes(args: list[list[str]], env: dict[str, str], logs: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Starts `python -m pipeline <args>` children; terminates whatever still runs afterwards."""
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    try:
        for i, arg in enumerate(args):
            with (logs / f"{arg[0]}-{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "pipeline", *arg], env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def await_decisions(config: dict[str, str], names: TopicNames, expected: int, timeout_s: float) -> PublishedOutputs:
    """Polls the decisions topic (read_committed) until `expected` distinct decisions or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = load_outputs(config, names)
        if len(outputs.decisions) >= expected or time.monotonic() > deadline:
            return outputs
        time.sleep(1.0)
