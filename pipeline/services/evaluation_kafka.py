"""The evaluation through the real pipeline: cases produced to Kafka, decided by workers and the baseline."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from pipeline.bench.evaluate import BudgetPoint, score_row
from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.core.errors import DpmError
from pipeline.core.scoring import Judge
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.writing.producer import EventProducer
from pipeline.services.cluster import child_env, cluster, pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest


def _trigger_id(case: Case, point: BudgetPoint) -> str:
    return f"{case.ref.case_id}@{point.name}"


def evaluate_via_kafka(
    cases: Sequence[Case],
    points: Mapping[str, list[BudgetPoint]],
    archs: Sequence[Architecture],
    *,
    judge: Judge,
    settings: Settings,
    workdir: Path,
    say: Callable[[str], None],
    progress: Callable[[int, int], None],
    timeout_s: float = 900.0,
) -> list[dict[str, Any]]:
    """Rows for every (case, budget, arch), decided by two projection workers and one baseline process."""
    names = TopicNames(f"eval-{dt.datetime.now(tz=dt.UTC).strftime('%Y%m%d%H%M%S%f')}")
    with cluster(settings, say) as bootstrap:
        config = {**settings.kafka.client_config(), "bootstrap.servers": bootstrap}
        create_pipeline_topics(config, names, partitions=3)
        # The workers accept the domains of the cases at hand (a case file may name any domain).
        env = child_env(bootstrap, names.prefix, DPM_DOMAINS=",".join(sorted({c.domain for c in cases})))
        commands = [["worker"], ["worker"]] if Architecture.DPM in archs else []
        commands += [["baseline"]] if Architecture.SUMM in archs else []
        keys = case_keys_from(settings, client_config=config, names=names)
        with pipeline_processes(commands, env, workdir / "logs"), closing(keys):
            producer = EventProducer(config, names, keys if settings.keys.encryption else None)
            for case in cases:
                case_points = points[case.ref.key]
                opening = CaseOpening(case.task, tuple(sorted({p.budget.chars for p in case_points})))
                positions = tuple(producer.append(case.trajectory.events, opening))
                for point in case_points:
                    producer.trigger(DecisionRequest(_trigger_id(case, point), case.ref, case.task, point.budget.chars,
                                                     tuple(archs), positions, len(positions), case.label))  # fmt: skip
            producer.close()
            expected = sum(len(points[c.ref.key]) for c in cases) * len(archs)
            say(f"produced {len(cases)} cases to {names.prefix}.*; waiting for {expected} decisions")
            outputs = await_decisions(config, names, expected, timeout_s, cipher=keys,
                                      progress=lambda n: progress(n, expected))  # fmt: skip
    if len(outputs.decisions) < expected:
        raise DpmError(f"only {len(outputs.decisions)} of {expected} decisions arrived; logs in {workdir / 'logs'}")
    rows = []
    for case in cases:
        for point in points[case.ref.key]:
            for arch in archs:
                key = DecisionKey(case.ref.tenant, DecisionId(_trigger_id(case, point), arch))
                rows.append(score_row(case, point, outputs.decisions[key], outputs.views[key],
                                      audits=len(outputs.audits[key]), judge=judge))  # fmt: skip
    return rows
