"""The main job end to end, then everything it started is stopped.

Broker, topics, two projection workers and the Summ-only baseline, generated cases, triggers,
the comparison and a replay sample.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.casefiles import write_case
from pipeline.compare import Comparison, compare
from pipeline.core.case import Case
from pipeline.core.errors import DpmError
from pipeline.core.task import Architecture, resolve_budget
from pipeline.kafka import local_broker
from pipeline.kafka.admin import admin_client, fetch_metadata
from pipeline.kafka.dump import read_topic
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames, ensure_topics, pipeline_topics
from pipeline.kafka.wire import CaseOpening, DecisionRequest
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.outputs_index import PublishedOutputs, load_outputs
from pipeline.replaying import ReplayLine, replay_many
from pipeline.settings import Settings

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    prefix: str
    triggers: int
    comparison: Comparison
    replays: tuple[ReplayLine, ...]
    duplicates: int
    dead_letters: int


@contextmanager
def _broker(settings: Settings, say: Say) -> Iterator[str]:
    """The configured cluster, or the local one (started here and stopped afterwards if it was not running)."""
    if settings.bootstrap_configured:
        yield settings.bootstrap_servers
        return
    running = local_broker.read_running(settings.home)
    if running is not None:
        cluster, already = running, True
    else:
        cluster, already = local_broker.start(
            settings.home, settings.cache_dir, settings.kafka_version, nodes=1, port=9092
        )
    say(f"local Kafka {'already running' if already else 'started'} at {cluster.bootstrap}")
    try:
        yield cluster.bootstrap
    finally:
        if not already:
            local_broker.stop(settings.home)
            say("stopped the local broker")


@contextmanager
def _processes(commands: list[list[str]], env: dict[str, str], logs: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = []
    try:
        for i, command in enumerate(commands):
            log = (logs / f"{command[3]}-{i}.log").open("wb")
            procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _await_decisions(
    config: dict[str, str], names: TopicNames, expected: int, timeout_s: float, progress: Callable[[int], None]
) -> PublishedOutputs:
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = load_outputs(config, names, with_audits=False)
        progress(len(outputs.decisions))
        if len(outputs.decisions) >= expected or time.monotonic() > deadline:
            return outputs
        time.sleep(2)


def run_demo(
    settings: Settings,
    workdir: Path,
    *,
    per_domain: int,
    timeout_s: float,
    say: Say,
    progress: Callable[[int, int], None],
) -> DemoResult:
    """Runs the whole pipeline once on generated cases; raises DpmError when decisions do not arrive."""
    prefix = f"demo-{dt.datetime.now(tz=dt.UTC).strftime('%Y%m%d%H%M%S')}"
    names = TopicNames(prefix)
    cases: list[Case] = generate_cases(GenerationSpec(per_domain=per_domain))
    for case in cases:
        write_case(case, workdir / "cases")
    _, budget = resolve_budget("moderate", fmean(c.trajectory.char_length for c in cases))
    say(f"generated {len(cases)} cases in {workdir / 'cases'}; moderate budget {budget.chars} characters")
    with _broker(settings, say) as bootstrap:
        config = {**settings.client_config(), "bootstrap.servers": bootstrap}
        brokers = len(fetch_metadata(config).broker_ids)
        ensure_topics(admin_client(config), pipeline_topics(names, partitions=3), min(3, brokers))
        say(f"topics {prefix}.* created")
        env = {**os.environ, "DPM_BOOTSTRAP": bootstrap, "DPM_TOPIC_PREFIX": prefix, "DPM_BACKEND": "extractive"}
        dpm = [sys.executable, "-m", "pipeline", "worker"]
        summ = [sys.executable, "-m", "pipeline", "baseline", "--budgets", str(budget.chars)]
        with _processes([dpm, dpm, summ], env, workdir) as _:
            say("started 2 projection workers and the Summ-only baseline")
            producer = EventProducer(config, names)
            for case in cases:
                positions = producer.append(case.trajectory.events, CaseOpening(case.task, (budget.chars,)))
                producer.trigger(DecisionRequest(f"{prefix}-{case.ref.case_id}", case.ref, case.task, budget.chars,
                                                 (Architecture.DPM, Architecture.SUMM), tuple(positions),
                                                 len(positions), case.label))  # fmt: skip
            producer.close()
            say(f"produced {sum(len(c.trajectory) for c in cases)} events and {len(cases)} triggers (dpm + summ)")
            expected = 2 * len(cases)
            outputs = _await_decisions(config, names, expected, timeout_s, lambda n: progress(n, expected))
        if len(outputs.decisions) < expected:
            raise DpmError(f"only {len(outputs.decisions)} of {expected} decisions arrived; logs in {workdir}")
        full = load_outputs(config, names)
        log = KafkaEventLog(config, names.events)
        try:
            ordered = sorted(full.decisions.values(), key=lambda r: r["decision_id"])
            sample = [r for arch in ("dpm", "summ") for r in [x for x in ordered if x["architecture"] == arch][:3]]
            replays = replay_many(sample, full.views, full.audits, log, ExtractiveBackend())
        finally:
            log.close()
        dead_letters = sum(1 for _ in read_topic(config, names.dlq))
    return DemoResult(
        prefix, len(cases), compare(full.decisions, full.triggers), tuple(replays), full.duplicates, dead_letters
    )
