"""The Summ-only baseline under a tenant's revoked key (KMIP, PyKMIP's server): refused key-revoked, nothing leaked.

The server's operator revokes the tenant's KEK after its agents wrote a case. The baseline cannot open
the events: each is dead-lettered `key-revoked` with its content withheld (no copy of it in the clear,
none sealed under a key that no longer opens), and the case's trigger is refused `key-revoked`, not as
a case it never heard of.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.provider_uri import provider_from_uri
from pipeline.services.cluster import pipeline_processes
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.kmip_support import kmip_server, revoke_current
from tests.pipeline_support import committed_records, create_topics, small_cases, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]
BUDGET = 900


def test_kmip_a_revoked_key_refuses_the_baseline_s_events_and_trigger_as_key_revoked_withholding_their_content(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    tenant = f"bank-{uuid.uuid4().hex[:8]}"
    case = small_cases(per_domain=1, tenant=tenant)[0]
    with kmip_server(tmp_path / "kmip") as server:
        uri = server.uri()
        provider = provider_from_uri(uri, local_root=tmp_path / "unused", pipeline_prefix=topic_names.prefix)
        keys = kafka_case_keys(kafka_config, topic_names.keys, provider)
        producer = EventProducer(kafka_config, topic_names, keys)
        positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
        producer.trigger(DecisionRequest("asked", case.ref, case.task, BUDGET, (Architecture.SUMM,), positions,
                                         len(positions)))  # fmt: skip
        producer.close()
        keys.close()
        revoke_current(server, f"dpm/{topic_names.prefix}", tenant)  # the server's operator refuses the tenant
        env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_KEK_PROVIDER": uri}
        with pipeline_processes([["baseline", "--trigger-wait", "3"]], env, tmp_path / "logs") as procs:
            letters = committed_records(kafka_config, topic_names.dlq, len(positions) + 1, timeout_s=180)
            assert procs[0].poll() is None, "the baseline goes on"
    bodies = [orjson.loads(r.value or b"") for r in letters]
    events = [b for b in bodies if b["source_topic"] == topic_names.events]
    triggers = [b for b in bodies if b["source_topic"] == topic_names.triggers]
    assert len(events) == len(positions)
    assert {(b["reason"], b.get("withheld")) for b in events} == {("key-revoked", "key-revoked")}
    assert [b["reason"] for b in triggers] == ["key-revoked"]
    leaked = [
        e.text[:40] for e in case.trajectory.events if e.text[:40].encode() in b"".join(r.value or b"" for r in letters)
    ]
    assert leaked == []
