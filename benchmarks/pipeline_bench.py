"""Pipeline benchmark (not a test): throughput with 1 and 2 workers, trigger-to-decision latency,
and the cost of reading one case when its partition holds 100 times as much other traffic.

Usage: python benchmarks/pipeline_bench.py [--triggers 150]
Uses DPM_BOOTSTRAP if set, else starts a private local broker on a free port and stops it after.
All figures of one run are measured side by side on the same broker.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.run import run_dpm
from pipeline.core.task import Architecture, Budget
from pipeline.kafka.admin import admin_client
from pipeline.kafka.keystore import kafka_case_keys
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.topics import TopicNames, TopicSpec, create_pipeline_topics, ensure_topics
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services.cluster import child_env, pipeline_processes, private_cluster
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.event import EventRecord
from pipeline.wire.run_records import run_records
from pipeline.wire.sealing import seal_body
from pipeline.wire.trigger import DecisionId, DecisionRequest

# Short cases (24 to 30 events), so a run measures the pipeline rather than the projection of long texts.
SHORT_CASES = GenerationSpec(per_domain=3, events=(24, 30), chars=(6_000, 7_500), tenant="bench")


@contextmanager
def broker() -> Iterator[str]:
    settings = Settings.from_env()
    if settings.kafka.bootstrap_configured:
        yield settings.kafka.bootstrap_servers
        return
    with tempfile.TemporaryDirectory() as home, private_cluster(settings, Path(home)) as cluster:
        yield cluster.bootstrap


def throughput(
    bootstrap: str, workers: int, triggers: int, workdir: Path, rate: float | None = None, *, encryption: bool = True
) -> tuple[float, list[float]]:
    """Decisions per second and trigger-to-decision latencies (ms) with `workers` worker processes.

    rate None sends every trigger at once (a backlog: throughput); a rate paces them (latency).
    With `encryption` (the default setting) events and outputs are sealed under per-case keys.
    """
    config = {"bootstrap.servers": bootstrap}
    names = TopicNames(f"bench-{uuid.uuid4().hex[:8]}")
    create_pipeline_topics(config, names, partitions=6)
    keys = kafka_case_keys(config, names.keys, LocalFileKeyProvider(workdir / "keys"))
    producer = EventProducer(config, names, keys if encryption else None)
    cases = generate_cases(SHORT_CASES)
    positions = {c.ref: tuple(producer.append(c.trajectory.events)) for c in cases}
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(workdir), DPM_BACKEND="extractive",
                    DPM_SESSION_TIMEOUT_MS="6000", DPM_TRANSACTION_TIMEOUT_MS="10000",
                    DPM_KEYS_DIR=str(workdir / "keys"), DPM_ENCRYPTION="on" if encryption else "off")  # fmt: skip
    with pipeline_processes([["worker"]] * workers, env, workdir / f"logs-{workers}"):
        time.sleep(8)  # let the group form before the clock starts
        for n in range(triggers):
            case = cases[n % len(cases)]
            producer.trigger(
                DecisionRequest(
                    f"b{n}",
                    case.ref,
                    case.task,
                    800,
                    (Architecture.DPM,),
                    positions[case.ref],
                    len(positions[case.ref]),
                )
            )
            if rate:
                producer.close()  # flushes: the trigger is on the broker now
                time.sleep(1 / rate)
        producer.close()
        outputs = await_decisions(config, names, triggers, timeout_s=600, cipher=keys)
    keys.close()
    if len(outputs.decisions) < triggers:
        raise SystemExit(f"only {len(outputs.decisions)} of {triggers} decisions arrived")
    sent = {DecisionRequest.decode(r.value).trigger_id: r.timestamp_ms for r in read_topic(config, names.triggers)}
    done = {  # decision ids are in clear in sealed records too
        DecisionId.parse(orjson.loads(r.value or b"")["decision_id"]).trigger_id: r.timestamp_ms
        for r in read_topic(config, names.decisions)
    }
    latencies = [float(done[t] - sent[t]) for t in done if sent.get(t) and done[t]]  # type: ignore[operator]
    # From the first trigger's timestamp to the last decision's (both set where they were produced, on
    # this host): the waiting reader's one-second polls do not blur the span.
    span_s = (max(t for t in done.values() if t) - min(t for t in sent.values() if t)) / 1000
    return triggers / span_s, latencies


def read_cost(bootstrap: str, noise_levels: tuple[int, ...] = (0, 10, 100, 1000), repeats: int = 10) -> list[float]:
    """Median seconds to read one 90-event case by offset, its partition holding `noise` times as much other traffic."""
    config = {"bootstrap.servers": bootstrap}
    results = []
    for noise in noise_levels:
        names = TopicNames(f"readcost-{uuid.uuid4().hex[:8]}")
        ensure_topics(admin_client(config), (TopicSpec(names.events, 1),), replication_factor=1)
        producer = EventProducer(config, names)
        case = CaseRef("bench", "target")
        positions = []
        for seq in range(1, 91):
            if noise:
                others = [Event(CaseRef("bench", f"other-{seq}-{i}"), 1, "doc", "x" * 300) for i in range(noise)]
                producer.append(others)
            positions += producer.append([Event(case, seq, "doc", "y" * 300)])
        producer.close()
        log = KafkaEventLog(config, names.events)
        timings = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            read = log.read(positions)
            timings.append(time.perf_counter() - t0)
            if len(read.records) != 90:
                raise SystemExit(f"read {len(read.records)} of 90 events")
        log.close()
        results.append(statistics.median(timings))
    return results


def sealing_cpu(repeats: int = 200) -> dict[str, float]:
    """What sealing adds to one decision on this CPU, without Kafka: opening its events, sealing its outputs."""
    case = generate_cases(SHORT_CASES)[0]
    with tempfile.TemporaryDirectory() as tmp:
        keys = CaseKeys(KeyRing(LocalFileKeyProvider(Path(tmp))), MemoryKeyTopic())
        bodies = [EventRecord(e).to_wire() for e in case.trajectory.events]
        sealed, clear = [orjson.dumps(seal_body(b, keys)) for b in bodies], [orjson.dumps(b) for b in bodies]
        budget = Budget(800)
        started = time.perf_counter()
        result = run_dpm(case.trajectory, case.task, budget, ExtractiveBackend())
        decide_s = time.perf_counter() - started
        positions = tuple(LogPosition(0, n) for n in range(len(bodies)))
        provenance = Provenance(
            DecisionId("cpu", Architecture.DPM), positions, PositionsSource.TRIGGER, "extractive", "b"
        )
        published = run_records(result, case.trajectory, task=case.task, budget=budget, provenance=provenance)
        outputs = [published.view.to_wire(), published.decision.to_wire(), *(a.to_wire() for a in published.audits)]

        def per_call(work: Callable[[], object]) -> float:
            return timeit.timeit(work, number=repeats) / repeats

        open_s = per_call(lambda: [EventRecord.decode(v, cipher=keys) for v in sealed])
        open_s -= per_call(lambda: [EventRecord.decode(v) for v in clear])
        seal_s = per_call(lambda: [orjson.dumps(seal_body(o, keys)) for o in outputs])
        seal_s -= per_call(lambda: [orjson.dumps(o) for o in outputs])
    return {"events": len(bodies), "outputs": len(outputs), "open_ms": open_s * 1000, "seal_ms": seal_s * 1000,
            "decide_ms": decide_s * 1000}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--triggers", type=int, default=150)
    parser.add_argument("--alternations", type=int, default=4, help="sealed/clear run pairs for the encryption cost")
    args = parser.parse_args()
    with broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        alone, ten, hundred, thousand = read_cost(bootstrap)
        # Sealed and clear runs alternate in ABBA order: the broker slows as topics accumulate, and a
        # fixed order would hand that drift to one side.
        runs: dict[bool, list[float]] = {True: [], False: []}
        for pair in range(args.alternations):
            for encryption in (False, True) if pair % 2 == 0 else (True, False):
                runs[encryption].append(throughput(bootstrap, 1, args.triggers, Path(tmp), encryption=encryption)[0])
        one, clear = statistics.fmean(runs[True]), statistics.fmean(runs[False])
        two, _ = throughput(bootstrap, 2, args.triggers, Path(tmp))
        _, paced = throughput(bootstrap, 1, 60, Path(tmp), rate=4.0)
    print(
        f"decisions/s, 1 worker : {one:8.1f}   (encryption on; backlog of {args.triggers} triggers, 2-core machine, "
        "broker included)"
    )
    sealed_runs, clear_runs = ([round(r, 1) for r in runs[k]] for k in (True, False))
    print(
        f"decisions/s, 1 worker, encryption off: {clear:8.1f}   (sealing costs {(1 - one / clear) * 100:.1f}%; "
        f"mean of {args.alternations} alternating runs each: sealed {sealed_runs}, clear {clear_runs})"
    )
    cpu = sealing_cpu()
    print(
        f"sealing CPU per decision, in process: open {cpu['events']:.0f} events +{cpu['open_ms']:.2f} ms, seal "
        f"{cpu['outputs']:.0f} outputs +{cpu['seal_ms']:.2f} ms; the decision itself {cpu['decide_ms']:.1f} ms "
        f"({(cpu['open_ms'] + cpu['seal_ms']) / cpu['decide_ms'] * 100:.1f}%)"
    )
    print(f"decisions/s, 2 workers: {two:8.1f}   (x{two / one:.2f})")
    q = statistics.quantiles(paced, n=100)
    print(
        f"trigger->decision latency, 1 worker, 4 triggers/s: p50 {q[49]:.0f} ms  p90 {q[89]:.0f} ms  p99 {q[98]:.0f} ms"
    )
    print(f"read one case (90 events) by offset, alone: {alone * 1000:.1f} ms")
    for factor, cost in ((10, ten), (100, hundred), (1000, thousand)):
        print(f"  partition also holding {factor:>4}x other traffic: {cost * 1000:7.1f} ms  ratio {cost / alone:5.1f}")


if __name__ == "__main__":
    main()
