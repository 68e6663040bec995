"""Lookups through the index across hosts: found without reading the topics, pages by time, erasure reaches them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipeline.client import CaseErasedError, DecisionMemory, DecisionNotFoundError, UnknownCursorError
from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import admin_client, topic_partitions
from pipeline.kafka.cluster.topics import TopicNames, TopicSpec, ensure_topics, pipeline_topics
from pipeline.services.audit_index import DecisionFilter, ErasedDecision, IndexedDecision
from pipeline.services.auditor import KafkaAuditor
from pipeline.services.cluster import pipeline_processes
from pipeline.wire.trigger import DecisionId
from tests.integration.test_client_appends import client_settings
from tests.pipeline_support import create_topics, worker_env
from tests.processes import dpm_cli

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # the readers' own behaviour

STEPS = [("document", "Credit report: score 702, no defaults."), ("document", "Pay stubs: annual income 84,000."),
         ("document", "Debt schedule: monthly debt 1,100.")]  # fmt: skip


def test_lookups_on_two_hosts_page_by_time_and_answer_an_erased_case_as_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    env = worker_env(kafka_bootstrap, topic_names, host_a)
    with (pipeline_processes([["worker"]], env, tmp_path / "logs"),
          DecisionMemory("acme", settings=client_settings(kafka_bootstrap, topic_names, host_a)) as acme):  # fmt: skip
        ids = []
        for case_id in ("gone", "kept", "kept"):
            acme.append_many(case_id, STEPS)
            ids.append(acme.decide(case_id, domain="loan", timeout=120).decision_id)
        assert acme.decisions_of("kept") == ids[1:]
        assert acme.decisions_of("kept", limit=1) == ids[1:2]
        assert acme.decisions_of("kept", after=ids[1]) == ids[2:]
        with pytest.raises(UnknownCursorError):
            acme.decisions_of("kept", after=ids[0])  # a decision of another case: no place to start after
        decided_at = time.monotonic()

    _auditor_pages_by_cursor(client_settings(kafka_bootstrap, topic_names, host_a), ids)

    # another host: an index of its own, built on first use; pages by time list what is settled: published
    # more than the transaction timeout (1 s here) and 5 s for clocks ago
    host_b_env = {**env, "DPM_HOME": str(host_b), "DPM_TRANSACTION_TIMEOUT_MS": "1000"}
    time.sleep(max(0.0, decided_at + 6.5 - time.monotonic()))
    # host B has no index yet: its first command builds one, says so and shows its progress (from 1 offset here)
    explained = dpm_cli("explain", "--decision", ids[0], "--tenant", "acme", "--json",
                        env={**host_b_env, "DPM_INDEX_PROGRESS_FROM": "1"})  # fmt: skip
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["decision_id"] == ids[0]  # stdout stays the answer
    assert "offsets of the output topics into" in explained.stderr
    assert str(host_b / "index") in explained.stderr
    first = json.loads(dpm_cli("decisions", "--tenant", "acme", "--since", "2000-01-01", "--limit", "2", "--json",
                               env=host_b_env).stdout)  # fmt: skip
    assert [d["decision_id"] for d in first["decisions"]] == ids[:2]  # oldest first
    rest = json.loads(dpm_cli("decisions", "--tenant", "acme", "--since", "2000-01-01", "--limit", "2", "--after",
                              first["next_after"], "--json", env=host_b_env).stdout)  # fmt: skip
    assert ([d["decision_id"] for d in rest["decisions"]], rest["next_after"]) == (ids[2:], None)
    refused = dpm_cli("decisions", "--since", "2000-01-01", env=host_b_env)
    assert refused.returncode != 0
    assert "--tenant" in refused.stderr

    erased = dpm_cli("erase", "--tenant", "acme", "--case", "gone", env=env)  # on host A
    assert erased.returncode == 0, erased.stderr
    _auditor_lists_erased(client_settings(kafka_bootstrap, topic_names, host_a), ids[0])
    with DecisionMemory("acme", settings=client_settings(kafka_bootstrap, topic_names, host_a)) as on_a:
        with pytest.raises(CaseErasedError):
            on_a.decision(ids[0])  # marked in host A's index by the erasure
        assert on_a.decision(ids[1]).decision_id == ids[1]
    with (DecisionMemory("acme", settings=client_settings(kafka_bootstrap, topic_names, host_b)) as on_b,
          pytest.raises(CaseErasedError)):  # fmt: skip
        on_b.decision(ids[0])  # host B's index said live: the record no longer opens, and it learns so
    with DecisionMemory("globex", settings=client_settings(kafka_bootstrap, topic_names, host_b)) as globex:
        for decision_id in (ids[0], ids[1], "never-made:dpm"):
            with pytest.raises(DecisionNotFoundError):
                globex.decision(decision_id)


def _auditor_pages_by_cursor(settings: Settings, ids: list[str]) -> None:
    """The auditor's pages list from the host's lookup index, newest first, by cursor; nothing held in memory."""
    auditor = KafkaAuditor(settings)
    auditor.refresh()  # the host's lookup index, brought up to date
    first = auditor.listing(DecisionFilter(tenant="acme"), 2)
    assert [str(item.decision_id) for item in first.items] == ids[:0:-1]  # newest first
    assert (first.newer, first.older is not None) == (None, True)
    rest = auditor.listing(DecisionFilter(tenant="acme"), 2, before=first.older)
    assert ([str(item.decision_id) for item in rest.items], rest.older) == ([ids[0]], None)
    one_case = auditor.listing(DecisionFilter(tenant="acme", case_id="gone"), 5)
    assert [str(item.decision_id) for item in one_case.items] == ids[:1]
    labels = {item.record.outcome.label for item in first.items if isinstance(item, IndexedDecision)}
    assert labels <= set(auditor.labels("acme"))
    oldest = auditor.lookup("acme", DecisionId.parse(ids[0]))
    assert isinstance(oldest, IndexedDecision)
    assert (oldest.view is not None, len(auditor.audits(oldest)) >= 1) == (True, True)
    assert auditor.events(oldest).trajectory is not None
    assert auditor.lookup("globex", DecisionId.parse(ids[0])) is None
    assert auditor.listing(DecisionFilter(tenant="globex"), 5).items == ()
    auditor.close()


def _auditor_lists_erased(settings: Settings, erased_id: str) -> None:
    """After `dpm erase`, the auditor lists the case's decision as erased and opens none of its content."""
    auditor = KafkaAuditor(settings)
    auditor.refresh()
    listed = auditor.listing(DecisionFilter(tenant="acme"), 5).items
    assert [type(item) for item in listed] == [IndexedDecision, IndexedDecision, ErasedDecision]
    assert isinstance(auditor.lookup("acme", DecisionId.parse(erased_id)), ErasedDecision)
    auditor.close()


def test_a_one_partition_contests_topic_is_refused_with_its_fix_and_migrated_in_place(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    outputs = {"cleanup.policy": "delete", "retention.ms": "-1"}
    ensure_topics(admin_client(kafka_config), (TopicSpec(topic_names.contests, 1, outputs),), 1)  # as made before
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    refused = dpm_cli("topics", "create", "--partitions", "3", env=env)
    assert refused.returncode == 1
    assert "partitions=1 (needs 3: `dpm topics migrate-contests` adds the partitions in place)" in refused.stderr
    assert ensure_topics(admin_client(kafka_config), pipeline_topics(topic_names, 3)[:-1], 1).created  # the rest
    migrated = dpm_cli("topics", "migrate-contests", env=env)
    assert f"{topic_names.contests}: 1 -> 3 partitions" in migrated.stdout, migrated.stdout + migrated.stderr
    assert "has its decisions topic's partitions already" in dpm_cli("topics", "migrate-contests", env=env).stdout
    created = dpm_cli("topics", "create", "--partitions", "3", env=env)
    assert created.returncode == 0, created.stderr
    assert topic_partitions(kafka_config, topic_names.contests) == 3
