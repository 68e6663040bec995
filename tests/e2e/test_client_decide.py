"""The client library against running workers: append a case's steps, get its decision back, replay it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.client import (
    AsyncDecisionMemory,
    CaseErasedError,
    DecisionMemory,
    DecisionRefusedError,
    DecisionTimeoutError,
)
from pipeline.core.events import CaseRef
from pipeline.core.task import TaskSpec
from pipeline.core.verification import ReplayStatus
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.services.cluster import pipeline_processes
from pipeline.services.erase import erase_case
from tests.integration.test_client_appends import client_settings
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import dpm_cli

# The door's waiting and typing are the client's own; what a broker release could change (its case
# writers' transactions and fencing) runs on both releases in tests/integration/test_client_appends.py.
pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]


def test_an_agent_appends_steps_and_gets_a_cited_decision_that_replays(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        for event in case.trajectory.events:  # the agent's steps as they happen: the library numbers them
            memory.append("case-7", kind=event.kind, text=event.text)
        with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
            decision = memory.decide("case-7", task=case.task, budget=2_000, timeout=120, idempotency_key="ask-1")
            again = memory.decide("case-7", task=case.task, budget=2_000, timeout=60, idempotency_key="ask-1")
            collected = memory.decision(decision.decision_id)
            explained = memory.explain(decision.decision_id)
            replayed_here = memory.replay(decision.decision_id)
            with DecisionMemory("acme", settings=settings) as other:  # another process, which never wrote case-7
                read_back = other.decision(decision.decision_id)  # its cited events read from the log
                theirs = other.decide("case-7", task=case.task, budget=2_000, timeout=120)
            after = memory.append("case-7", kind="message", text="a step after the other's decision")
    assert decision.label in case.task.label_space
    assert decision.facts
    assert all(f.cites for f in decision.facts)
    texts = {e.seq: e.text for e in case.trajectory.events}
    assert all(c.text == texts[c.seq] for f in decision.facts for c in f.cites)  # citations resolved to the events
    assert decision.usage.calls >= 1
    assert decision.record.events_count == len(case.trajectory)
    assert again.decision_id == decision.decision_id == collected.decision_id  # the retry made no second decision
    published = [r for r in read_topic(kafka_config, topic_names.decisions) if r.key]
    assert sorted(r.key.decode() for r in published if r.key) == sorted([decision.decision_id, theirs.decision_id])
    assert explained.events_unreadable is None
    assert all(f.citations_valid for f in explained.facts)  # as the auditor's page checks them
    assert replayed_here.status is ReplayStatus.MATCH
    assert read_back.facts == decision.facts  # from the log, the same events this client remembered sending
    assert theirs.record.events_count == len(case.trajectory)  # the case as committed when it asked
    assert after.seq == len(case.trajectory) + 1  # asking for a decision fenced nobody: the writer goes on
    replayed = dpm_cli(*decision.replay_command.split()[1:], env={"DPM_BOOTSTRAP": kafka_bootstrap,
                                                                 "DPM_TOPIC_PREFIX": topic_names.prefix})  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert "MATCH" in replayed.stdout


def test_a_refused_request_is_a_typed_error_and_a_late_decision_is_collected_by_id(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append_many("case-9", [(e.kind, e.text) for e in case.trajectory.events])
        with pytest.raises(DecisionTimeoutError) as timed_out:  # no worker runs yet
            memory.decide("case-9", task=case.task, budget=2_000, timeout=2)
        late_id = timed_out.value.decision_id
        assert "start one with `dpm worker`" in str(timed_out.value)  # a newcomer is told what is missing
        with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
            late = memory.wait(late_id, timeout=120)
            unknown = TaskSpec("no-such-domain", "Decide.", ("YES", "NO"))
            with pytest.raises(DecisionRefusedError) as refused:
                memory.decide("case-9", task=unknown, budget=2_000, timeout=60)
    assert late.decision_id == late_id
    assert late.label in case.task.label_space
    assert refused.value.reason == "schema"
    assert "no-such-domain" in refused.value.detail


def test_a_thousand_waiting_calls_share_one_replies_reader(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    cases = small_cases(per_domain=1, tenant="acme")[:2]
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)

    async def run() -> set[str]:
        async with AsyncDecisionMemory("acme", settings=settings) as memory:
            for n, case in enumerate(cases):
                await memory.append_many(f"case-{n}", [(e.kind, e.text) for e in case.trajectory.events])
            asked = [await memory.request(f"case-{n}", task=c.task, budget=2_000) for n, c in enumerate(cases)]
            waits = [memory.wait(asked[i % len(asked)], timeout=120) for i in range(1_000)]
            assert memory.sync.waiting == len(asked)  # a thousand calls, one future per decision id
            with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path),
                                    tmp_path / "logs"):  # fmt: skip
                decided = await asyncio.gather(*waits)
        return {d.decision_id for d in decided}

    assert len(asyncio.run(run())) == 2


def test_an_erased_case_is_gone_from_every_cache_of_the_client_and_refused_from_then_on(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)

    async def run() -> None:
        async with AsyncDecisionMemory("acme", settings=settings) as memory:
            await memory.append_many("case-e", [(e.kind, e.text) for e in case.trajectory.events])
            with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path),
                                    tmp_path / "logs"):  # fmt: skip
                decided = await memory.decide("case-e", task=case.task, budget=2_000, timeout=120,
                                              idempotency_key="ask-e")  # fmt: skip
            await asyncio.to_thread(erase_case, settings, CaseRef("acme", "case-e"))  # as `dpm erase`, elsewhere
            await asyncio.sleep(3)  # the client learns it from the key topic within about a second
            # the reply this client waited for, and the typed decision it kept, are gone with the key
            with pytest.raises(CaseErasedError):
                await memory.collect(decided.decision_id, wait_s=5)
            with pytest.raises(CaseErasedError):  # a retried request with the same key
                await memory.decide("case-e", task=case.task, budget=2_000, timeout=10, idempotency_key="ask-e")
            with pytest.raises(CaseErasedError):
                await memory.append("case-e", kind="message", text="a step after the erasure")
            with pytest.raises(CaseErasedError):
                await memory.decisions_of("case-e")
        with DecisionMemory("acme", settings=settings) as fresh:  # a process started after the erasure
            with pytest.raises(CaseErasedError):
                fresh.decision(decided.decision_id)
            with pytest.raises(CaseErasedError):
                fresh.append("case-e", kind="message", text="a step after the erasure")
            with pytest.raises(CaseErasedError):
                fresh.replay(decided.decision_id)
            fresh.append("case-e2", kind="message", text="a subject who comes back is a new case")

    asyncio.run(run())
    latest = {r.key: r.value for r in read_topic(kafka_config, topic_names.events) if r.key}
    erased = {k: v for k, v in latest.items() if k.startswith(b"acme/case-e/")}
    assert len(erased) == len(case.trajectory)  # nothing appended after the erasure
    assert all(v is None for v in erased.values())  # each event tombstoned


def test_requests_wait_for_their_case_heads_without_holding_the_client_s_threads(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)

    async def run() -> tuple[list[str], list[str]]:
        async with AsyncDecisionMemory("acme", settings=settings, threads=2) as memory:
            steps = [(e.kind, e.text) for e in case.trajectory.events]
            await asyncio.gather(*(memory.append_many(f"case-{n}", steps) for n in range(20)))
            asked = [memory.request(f"case-{n}", task=case.task, budget=2_000, idempotency_key="k") for n in range(20)]
            first = await asyncio.gather(*asked)
            again = await asyncio.gather(*(memory.request(f"case-{n}", task=case.task, budget=2_000,
                                                          idempotency_key="k") for n in range(20)))  # fmt: skip
        return list(first), list(again)

    first, again = asyncio.run(run())
    assert len(set(first)) == 20
    assert again == first  # a retry is known from the case's head: not sent again
    assert len(list(read_topic({**kafka_config, "isolation.level": "read_committed"}, topic_names.triggers))) == 20
