"""A tenant whose keys live in a key service decides, replays, rotates and erases through the dpm command.

Each provider against a real server of its kind, started by the test: KMIP (PyKMIP's own server over
mutual TLS, certificates made here) and AWS KMS (moto's server, the real boto3). A worker process and
the `dpm` commands reach the service through the provider URI in DPM_KEK_PROVIDER, as an operator's
deployment does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.provider_uri import provider_from_uri
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.kmip_support import kmip_server
from tests.kms_support import CREDENTIALS, REGION, aws_credentials, moto_server
from tests.pipeline_support import small_cases, worker_env
from tests.processes import dpm_cli

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]
BUDGET = 900


@pytest.fixture(params=["kmip", "aws_kms"])
def provider_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The provider URI of a server of that kind, running for the test."""
    if request.param == "kmip":
        with kmip_server(tmp_path / "kmip") as endpoint:
            yield endpoint.uri()
        return
    with aws_credentials(), moto_server() as port:
        yield f"aws-kms:?region={REGION}&endpoint=http://127.0.0.1:{port}"


def test_a_tenant_on_a_key_service_decides_replays_rotates_and_erases_through_dpm(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, provider_uri: str
) -> None:
    create_pipeline_topics(kafka_config, topic_names, 3, replication=1)
    tenant = f"bank-{uuid.uuid4().hex[:8]}"
    gone, kept = small_cases(per_domain=1, tenant=tenant)[:2]
    provider = provider_from_uri(provider_uri, local_root=tmp_path / "unused", pipeline_prefix=topic_names.prefix)
    keys = kafka_case_keys(kafka_config, topic_names.keys, provider)
    producer = EventProducer(kafka_config, topic_names, keys)  # each event sealed under a key the service wrapped
    for case in (gone, kept):
        positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
        producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, BUDGET, (Architecture.DPM,),
                                         positions, len(positions)))  # fmt: skip
    producer.close()
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), **CREDENTIALS, "DPM_KEK_PROVIDER": provider_uri}
    with pipeline_processes([["worker"]], env, tmp_path / "logs"):
        decided = await_decisions(kafka_config, topic_names, 2, timeout_s=180, cipher=keys)
    keys.close()
    assert len(decided.decisions) == 2

    def replay() -> dict[str, str]:
        answered = dpm_cli("replay", "--tenant", tenant, env=env)
        return {line.split()[1]: line for line in answered.stdout.splitlines() if ":dpm" in line}

    before = replay()
    assert len(before) == 2
    assert all("MATCH" in line for line in before.values()), before
    rotated = dpm_cli("keys", "rotate", "--tenant", tenant, env=env)
    assert "key-encryption key v2 current; 2 data key(s) wrapped again" in rotated.stdout, rotated.stderr
    assert all("MATCH" in line for line in replay().values())  # decided before the rotation, replayed after it
    erased = dpm_cli("erase", "--tenant", tenant, "--case", gone.ref.case_id, env=env)
    assert erased.returncode == 0, erased.stdout + erased.stderr
    after = replay()
    assert "ERASED" in after[f"{gone.ref.case_id}:dpm"], after
    assert "MATCH" in after[f"{kept.ref.case_id}:dpm"], after
    assert dpm_cli("erase", "--tenant", tenant, env=env).returncode == 0  # the tenant: its KEK destroyed
    assert all("ERASED" in line for line in replay().values())
    assert provider.versions(tenant) == []  # nothing of the tenant's KEK is left at the service
