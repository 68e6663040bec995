"""Reads for a fleet (`make bench` section `lookups`): finding one decision however long the output topics are.

Measured on one local broker and the offline backend, sealing on. Twenty real decisions are made
first (a worker child, the client in this process); then the output topics are filled with other
records written directly (small ones: about 200 bytes, where a real view or audit record is
kilobytes, so the index's build and catch-up rows are per record, not per byte) and the key topic
with as many other cases' key records, up to 1,000, 100,000 and 1,000,000 records per output topic.
At each size, looking up the oldest (the twenty real ones):

- `decision(id)` and `explain(id)` p50/p99 through a warm client, and the first `decision(id)` of
  a fresh client (its constructor timed apart);
- `GET /v1/decisions/{id}` p50/p99 from `dpm api` (a child sharing the host's index);
- `dpm explain --decision` as a whole process;
- the auditor's pages finding and opening the oldest decision, and its list: its start, and its
  first and last page of the tenant's decisions and a case's page, each read by cursor;
- the index's first build on a host that had none (what every other process then skips), its
  bytes per decision, and a catch-up after 10,000 decisions were published while nothing read.

Before the lookups at each size the host's index is brought up to date with the fill, as a door
keeping it current would have read it as it came.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from benchmarks.api_bench import _await_api, _http_session
from pipeline.client import DecisionMemory
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.kafka.reading.output_index import OutputIndex
from pipeline.services.api_keys import ApiKeys
from pipeline.services.audit_index import DecisionFilter, IndexedDecision
from pipeline.services.auditor import KafkaAuditor
from pipeline.services.cluster import child_env, pipeline_processes
from pipeline.wire.headers import TENANT_HEADER
from pipeline.wire.key import KeyRecord
from pipeline.wire.trigger import DecisionId

PARTITIONS = 6
SIZES = tuple(int(n) for n in os.environ.get("DPM_BENCH_LOOKUP_SIZES", "1000,100000,1000000").split(","))
REAL = 20  # real decisions, made first: the oldest in every topic
LOOKUPS = 60  # per measurement (the twenty ids in turn)
FRESH = 20  # fresh clients per size, each looking one of the twenty up
CATCH_UP = 10_000  # decisions published while no process read
TENANT = "acme"
Headers = list[tuple[str, str | bytes | None]]
TARGETS = {"warm_p50_ms": 20.0, "warm_p99_ms": 100.0, "fresh_p50_ms": 20.0, "fresh_p99_ms": 100.0,
           "largest_over_smallest": 2.0, "cli_explain_1m_s": 1.5, "catch_up_10k_s": 5.0,
           "index_bytes_per_decision": 300.0}  # fmt: skip


def _pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 2) if len(values) > 1 else values[0]


def _timings(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": _pct(samples, 50), "p99_ms": _pct(samples, 99)}


class Filler:
    """Writes other tenants' decisions (decision, view, audit: one record each) and other cases' key records."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.names = names
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                                   "compression.type": "lz4", "enable.idempotence": True})  # fmt: skip
        self.written = 0

    def _produce(self, topic: str, key: bytes, value: bytes, headers: Headers, partition: int = -1) -> None:
        """Produces one record, waiting for deliveries while the producer's queue is full."""
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=headers, partition=partition)
            except BufferError:
                self._producer.poll(0.1)
            else:
                return

    def decisions(self, count: int) -> None:
        names, produce = self.names, self._produce
        for n in range(self.written, self.written + count):
            decision_id = f"filler-{n:09d}:dpm"
            tenant, case_id = f"other-{n % 97}", f"case-{n}"
            key = decision_id.encode()
            headers: Headers = [(TENANT_HEADER, tenant.encode())]
            clear = {"decision_id": decision_id, "tenant": tenant, "case_id": case_id}
            produce(names.views, key=key, value=orjson.dumps({**clear, "schema": "filler"}), headers=headers)
            produce(names.decisions, key=key, value=orjson.dumps({**clear, "decision": {"label": "APPROVE"}}),
                    headers=headers)  # fmt: skip
            produce(names.audit, key=key, value=orjson.dumps({**clear, "call_index": 0}),
                    headers=[*headers, ("ce_id", f"{decision_id}/audit/0".encode())])  # fmt: skip
            case = CaseRef(tenant, case_id)
            record = KeyRecord(case, uuid.uuid4().hex[:16], "v1", os.urandom(60), int(time.time() * 1000))
            produce(names.keys, key=case.key.encode(), value=record.encode(), headers=[],
                    partition=case_partition(case, PARTITIONS))  # fmt: skip
            if n % 10_000 == 0:
                self._producer.poll(0)
        self.written += count
        if self._producer.flush(300):
            raise SystemExit("the filler's records were not all written")


@contextmanager
def _pipeline(bootstrap: str, work: Path) -> Iterator[tuple[TopicNames, dict[str, str], Settings]]:
    names = TopicNames(f"bench-lookups-{uuid.uuid4().hex[:8]}")
    config = {"bootstrap.servers": bootstrap}
    create_pipeline_topics(config, names, PARTITIONS, replication=1)
    home = work / f"lookups-{names.prefix}"
    env = child_env(bootstrap, names.prefix, DPM_HOME=str(home), DPM_BACKEND="extractive",
                    DPM_API_KEYS_FILE=str(home / "api-keys.json"))  # fmt: skip
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("DPM_")})
    with pipeline_processes([["worker"]], env, work / f"logs-{names.prefix}"):
        yield names, env, settings


def _real_decisions(settings: Settings) -> list[str]:
    ids = []
    with DecisionMemory(TENANT, settings=settings) as memory:
        for n in range(REAL):
            case = f"applicant-{n}"
            memory.append_many(case, [("document", "Credit report: score 702, no defaults."),
                                      ("document", "Pay stubs: annual income 84,000."),
                                      ("document", "Debt schedule: monthly debt 1,100.")])  # fmt: skip
            ids.append(memory.decide(case, domain="loan", timeout=120).decision_id)
    return ids


def _client_lookups(settings: Settings, ids: list[str]) -> dict[str, Any]:
    """Warm `decision` and `explain`, then fresh clients' first `decision` (constructor apart)."""
    warm: dict[str, list[float]] = {"decision": [], "explain": []}
    with DecisionMemory(TENANT, settings=settings) as memory:
        memory.decision(ids[0])  # the client's index and key reader opened
        for n in range(LOOKUPS):
            for what, call in (("decision", memory.decision), ("explain", memory.explain)):
                started = time.perf_counter()
                call(ids[n % len(ids)])
                warm[what].append((time.perf_counter() - started) * 1000)
    fresh, made = [], []
    for n in range(FRESH):
        started = time.perf_counter()
        with DecisionMemory(TENANT, settings=settings) as memory:
            ready = time.perf_counter()
            memory.decision(ids[n % len(ids)])
            fresh.append((time.perf_counter() - ready) * 1000)
            made.append((ready - started) * 1000)
    return {"decision": _timings(warm["decision"]), "explain": _timings(warm["explain"]),
            "fresh_decision": _timings(fresh), "fresh_constructor_p50_ms": _pct(made, 50),
            "fresh_with_constructor": _timings([f + m for f, m in zip(fresh, made, strict=True)])}  # fmt: skip


def _http_lookups(env: dict[str, str], home: Path, ids: list[str]) -> dict[str, float]:
    port = free_cluster_port(1)
    key = ApiKeys(home / "api-keys.json").add(TENANT)[1]
    with pipeline_processes([["api", "--port", str(port)]], env, home / f"api-logs-{port}"):
        _await_api(port)

        async def measure() -> list[float]:
            samples = []
            async with _http_session(port, key, 4) as http:
                for n in range(LOOKUPS + 1):
                    started = time.perf_counter()
                    async with http.get(f"/v1/decisions/{ids[n % len(ids)]}") as answer:
                        if answer.status != 200:
                            raise SystemExit(f"GET a decision answered {answer.status}: {await answer.text()}")
                        await answer.read()
                    samples.append((time.perf_counter() - started) * 1000)
            return samples[1:]  # the first opened the door's index and key reader

        return _timings(asyncio.run(measure()))


def _cli_explain(env: dict[str, str], decision_id: str) -> dict[str, float]:
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipeline", "explain", "--decision", decision_id, "--tenant", TENANT],
                       env=env, check=True, capture_output=True)  # fmt: skip
        runs.append(time.perf_counter() - started)
    return {"first_s": round(runs[0], 2), "p50_s": round(statistics.median(runs), 2)}


def _ui_oldest(settings: Settings, decision_id: str) -> float:
    """The auditor's pages finding the oldest decision (through the lookup index) and opening its record and view.

    Its page's reads of the case's events and audit records are the `ui` section's.
    """
    auditor = KafkaAuditor(settings)
    try:
        started = time.perf_counter()
        item = auditor.lookup(TENANT, DecisionId.parse(decision_id))
        if not isinstance(item, IndexedDecision) or item.view is None:
            raise SystemExit(f"the auditor did not open {decision_id}: {item!r}")
        return round((time.perf_counter() - started) * 1000, 1)
    finally:
        auditor.close()


def _ui_pages(settings: Settings) -> dict[str, float]:
    """The auditor's list: its start (the host's index brought up to date), then the tenant's pages of 5, newest first.

    The first page, and the last (the oldest decisions), each read through the lookup index at its
    cursor; and the first page of one case.
    """
    started = time.perf_counter()
    auditor = KafkaAuditor(settings)
    try:
        auditor.refresh()
        start_s = time.perf_counter() - started
        wanted, timings = DecisionFilter(tenant=TENANT), []
        page = None
        while page is None or page.older is not None:
            began = time.perf_counter()
            page = auditor.listing(wanted, 5, before=None if page is None else page.older)
            timings.append((time.perf_counter() - began) * 1000)
        if len(timings) != -(-REAL // 5):
            raise SystemExit(f"the auditor's list paged {len(timings)} pages of 5 through {REAL} decisions")
        began = time.perf_counter()
        auditor.listing(DecisionFilter(tenant=TENANT, case_id="applicant-0"), 5)
        return {
            "start_s": round(start_s, 2),
            "first_page_ms": round(timings[0], 1),
            "last_page_ms": round(timings[-1], 1),
            "case_page_ms": round((time.perf_counter() - began) * 1000, 1),
        }
    finally:
        auditor.close()


def _index_build(bootstrap: str, names: TopicNames, work: Path) -> dict[str, float]:
    """A host with no index file: how long the first catch-up takes, and the index's bytes per decision."""
    index = OutputIndex({"bootstrap.servers": bootstrap}, names, work / f"cold-index-{uuid.uuid4().hex[:6]}")
    started = time.perf_counter()
    caught = index.catch_up()
    seconds = time.perf_counter() - started
    size, decisions = index.store.size()
    index.close()
    return {"build_s": round(seconds, 2), "records": caught.records, "bytes_per_decision": round(size / decisions, 1)}


def _host_current(bootstrap: str, names: TopicNames, settings: Settings) -> float:
    """Brings the host's index up to date with the fill (what a door keeping it current reads as it comes).

    Untimed in the lookups: without it, the door measured next would spend the run catching up.
    """
    index = OutputIndex({"bootstrap.servers": bootstrap}, names, settings.index_dir())
    started = time.perf_counter()
    index.catch_up()
    index.close()
    return round(time.perf_counter() - started, 2)


def _catch_up(bootstrap: str, names: TopicNames, filler: Filler, settings: Settings) -> dict[str, float]:
    """Brings the host's index up to date, publishes CATCH_UP decisions, times the next catch-up."""
    config = {"bootstrap.servers": bootstrap}
    index = OutputIndex(config, names, settings.index_dir())
    index.catch_up()
    index.close()
    filler.decisions(CATCH_UP)
    restarted = OutputIndex(config, names, settings.index_dir())
    started = time.perf_counter()
    caught = restarted.catch_up()
    seconds = time.perf_counter() - started
    restarted.close()
    return {"decisions": caught.decisions, "records": caught.records, "seconds": round(seconds, 2)}


def measure(bootstrap: str, work: Path) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    with _pipeline(bootstrap, work) as (names, env, settings):
        ids = _real_decisions(settings)
        filler = Filler(bootstrap, names)
        for size in SIZES:
            filler.decisions(max(0, size - REAL - filler.written))  # the catch-ups' decisions count too
            print(f"  lookups at {size:,} records per output topic ...", flush=True)
            row: dict[str, Any] = {"index": _index_build(bootstrap, names, work)}
            row["host_caught_up_s"] = _host_current(bootstrap, names, settings)
            row["client"] = _client_lookups(settings, ids)
            row["http"] = _http_lookups(env, settings.paths.home, ids)
            row["cli_explain"] = _cli_explain(env, ids[0])
            row["ui_oldest_ms"] = _ui_oldest(settings, ids[0])
            row["ui_pages"] = _ui_pages(settings)
            row["catch_up"] = _catch_up(bootstrap, names, filler, settings)
            sizes[str(size)] = row
    return _with_targets({"real_decisions": REAL, "sizes": sizes})


def _with_targets(figures: dict[str, Any]) -> dict[str, Any]:
    rows = figures["sizes"]
    small, large = rows[str(min(SIZES))], rows[str(max(SIZES))]
    warm = [r["client"][w] for r in rows.values() for w in ("decision", "explain")] + [r["http"] for r in rows.values()]
    fresh = [r["client"]["fresh_decision"] for r in rows.values()]
    ratio = max(large["client"][w]["p50_ms"] / small["client"][w]["p50_ms"] for w in ("decision", "explain",
                                                                                        "fresh_decision"))  # fmt: skip
    checks = {
        "warm_p50_ms": max(t["p50_ms"] for t in warm) <= TARGETS["warm_p50_ms"],
        "warm_p99_ms": max(t["p99_ms"] for t in warm) <= TARGETS["warm_p99_ms"],
        "fresh_p50_ms": max(t["p50_ms"] for t in fresh) <= TARGETS["fresh_p50_ms"],  # a fresh client's first lookup
        "fresh_p99_ms": max(t["p99_ms"] for t in fresh) <= TARGETS["fresh_p99_ms"],
        "largest_over_smallest": ratio <= TARGETS["largest_over_smallest"],
        "cli_explain_1m_s": large["cli_explain"]["p50_s"] <= TARGETS["cli_explain_1m_s"],
        "catch_up_10k_s": max(r["catch_up"]["seconds"] for r in rows.values()) <= TARGETS["catch_up_10k_s"],
        "index_bytes_per_decision": large["index"]["bytes_per_decision"] <= TARGETS["index_bytes_per_decision"],
        "ui_opens_oldest": all(r["ui_oldest_ms"] is not None for r in rows.values()),  # it opened at every size
    }
    return {**figures, "largest_over_smallest": round(ratio, 2), "targets": TARGETS, "checks": checks,
            "targets_met": all(checks.values())}  # fmt: skip
