"""What tenancy by topic costs the cluster: topics and partitions per tenant, onboarding, and discovery.

On a private local cluster of its own it onboards N tenants (`dpm tenants add`, 8 topics of P
partitions each), starts one projection worker subscribed to every tenant's triggers topic, and
measures: the time to onboard, the worker's first decision after its start (its join and assignment
over N x P triggers partitions), and the time from onboarding tenant N+1 while the worker runs to
that tenant's first decision (the pattern subscription's discovery, then a rebalance).

    python benchmarks/tenancy.py [--tenants 200] [--partitions 3] [--out benchmarks/tenancy.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.config.settings import Settings, keys_folder
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.services.cluster import child_env, pipeline_processes, private_cluster
from pipeline.services.read_outputs import await_decisions
from pipeline.services.tenants import add_tenant
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest

BUDGET = 900


def _decide_one(config: dict[str, str], names: TopicNames, keys_dir: Path, tenant: str, timeout_s: float) -> float:
    """Writes one case of `tenant` and its trigger; returns the seconds until its decision is readable."""
    topics = names.of_tenant(tenant)
    case = generate_cases(GenerationSpec(per_domain=1, events=(24, 30), chars=(6_000, 7_500), tenant=tenant))[0]
    started = time.monotonic()
    producer = EventProducer(config, topics)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
    producer.trigger(DecisionRequest(f"{tenant}-first", case.ref, case.task, BUDGET, (Architecture.DPM,), positions,
                                     len(positions)))  # fmt: skip
    producer.close()
    keys = kafka_case_keys(config, topics.keys, LocalFileKeyProvider(keys_folder(keys_dir, names.prefix)))
    try:
        await_decisions(config, topics, 1, timeout_s=timeout_s, cipher=keys)
    finally:
        keys.close()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/tenancy.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpm-tenancy-") as tmp:
        work = Path(tmp)
        os.environ["DPM_KEYS_DIR"] = str(work / "keys")
        with private_cluster(Settings.from_env({}), work / "cluster") as running:
            names = TopicNames("tenancy")
            env = child_env(running.bootstrap, names.prefix, DPM_HOME=str(work), DPM_TENANCY="topics",
                            DPM_BACKEND="extractive", DPM_KEYS_DIR=str(work / "keys"))  # fmt: skip
            settings = Settings.from_env(env)
            config = settings.kafka.client_config()
            started = time.monotonic()
            for n in range(args.tenants):
                add_tenant(settings, f"t{n:04d}", args.partitions, replication=1)
            onboard_s = time.monotonic() - started
            print(f"onboarded {args.tenants} tenants in {onboard_s:.1f} s", flush=True)
            with pipeline_processes([["worker"]], env, work / "logs"):
                first_s = _decide_one(config, names, work / "keys", "t0000", timeout_s=600)
                print(f"first decision {first_s:.1f} s after the worker started", flush=True)
                added = time.monotonic()
                add_tenant(settings, "late", args.partitions, replication=1)
                _decide_one(config, names, work / "keys", "late", timeout_s=600)
                discovery_s = time.monotonic() - added  # from onboarding to its first decision
                print(f"a tenant onboarded while the worker ran: decided {discovery_s:.1f} s later", flush=True)
    figures = {
        "tenants": args.tenants,
        "partitions_per_topic": args.partitions,
        "topics": 8 * (args.tenants + 1),
        "partitions": 8 * args.partitions * (args.tenants + 1),
        "onboard_s": round(onboard_s, 1),
        "onboard_per_tenant_s": round(onboard_s / args.tenants, 3),
        "first_decision_after_start_s": round(first_s, 1),
        "new_tenant_decided_after_s": round(discovery_s, 1),
        "measured": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
