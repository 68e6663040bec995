"""The main job end to end, then everything it started is stopped and (unless kept) removed.

Broker, topics, two projection workers and the Summ-only baseline, generated cases, triggers,
the comparison and a replay sample.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.core.errors import DpmError
from pipeline.core.task import Architecture, resolve_budget
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics, remove_pipeline
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.services.cluster import child_env, cluster, pipeline_processes
from pipeline.services.compare import Comparison, compare
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.services.replay import ReplayLine, registry_backends, replay_many
from pipeline.wire.case_files import write_case
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest

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
def demo_session(
    settings: Settings,
    workdir: Path,
    *,
    per_domain: int,
    timeout_s: float,
    say: Say,
    progress: Callable[[int, int], None],
    keep: bool = False,
) -> Iterator[DemoResult]:
    """Runs the whole pipeline once on generated cases and yields what it found, broker still up.

    Afterwards the demo's topics and groups are removed and a broker it started is stopped, unless
    `keep`; after a failure (DpmError when decisions do not arrive) everything is kept for reading.
    """
    prefix = f"demo-{dt.datetime.now(tz=dt.UTC).strftime('%Y%m%d%H%M%S')}"
    names = TopicNames(prefix)
    cases: list[Case] = generate_cases(GenerationSpec(per_domain=per_domain))
    for case in cases:
        write_case(case, workdir / "cases")
    _, budget = resolve_budget("moderate", fmean(c.trajectory.char_length for c in cases))
    say(f"generated {len(cases)} cases in {workdir / 'cases'}; moderate budget {budget.chars} characters")
    with cluster(settings, say, keep_running=keep) as bootstrap, ExitStack() as stack:
        config = {**settings.kafka.client_config(), "bootstrap.servers": bootstrap}
        create_pipeline_topics(config, names, partitions=3)
        say(f"topics {prefix}.* created")
        env = child_env(bootstrap, prefix, DPM_BACKEND="extractive")
        summ = ["baseline", "--budgets", str(budget.chars)]
        keys = stack.enter_context(closing(case_keys_from(settings, client_config=config, names=names)))
        with pipeline_processes([["worker"], ["worker"], summ], env, workdir):
            say("started 2 projection workers and the Summ-only baseline")
            producer = EventProducer(config, names, keys if settings.keys.encryption else None)
            for case in cases:
                positions = producer.append(case.trajectory.events, CaseOpening(case.task, (budget.chars,)))
                producer.trigger(DecisionRequest(f"{prefix}-{case.ref.case_id}", case.ref, case.task, budget.chars,
                                                 (Architecture.DPM, Architecture.SUMM), tuple(positions),
                                                 len(positions), case.label))  # fmt: skip
            producer.close()
            say(f"produced {sum(len(c.trajectory) for c in cases)} events and {len(cases)} triggers (dpm + summ)")
            expected = 2 * len(cases)
            outputs = await_decisions(config, names, expected, timeout_s, cipher=keys,
                                      progress=lambda n: progress(n, expected))  # fmt: skip
            if len(outputs.decisions) < expected:
                raise DpmError(f"only {len(outputs.decisions)} of {expected} decisions arrived; logs in {workdir}")
            full = load_outputs(config, names, cipher=keys)
        log = KafkaEventLog(config, names.events)
        try:
            ordered = sorted(full.decisions.values(), key=lambda r: r.decision_id)
            sample = [r for arch in Architecture for r in [x for x in ordered if x.architecture is arch][:3]]
            backends = registry_backends(settings.model, "extractive")
            replays = replay_many(sample, full.views, full.audits, log, backends, cipher=keys)
        finally:
            log.close()
        dead_letters = sum(1 for _ in read_topic(config, names.dlq))
        yield DemoResult(
            prefix, len(cases), compare(full.decisions, full.triggers), tuple(replays), full.duplicates, dead_letters
        )
        if not keep:
            removed = remove_pipeline(config, prefix)
            say(f"removed the demo's {len(removed)} topics ({prefix}.*, {prefix}-*) and its consumer groups")
