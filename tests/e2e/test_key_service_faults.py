"""A tenant's key service (AWS KMS, moto's server) cut off while agents ask for decisions: retried, refused as
retryable, and decided once it is back, with the same idempotency key; nothing read as an erasure."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.client import DecisionMemory, DecisionRefusedError, KeyServiceUnavailableError
from pipeline.config.settings import Settings
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.services.cluster import pipeline_processes
from tests.kms_support import CREDENTIALS, REGION, Gate, aws_credentials, moto_server
from tests.pipeline_support import committed_records, create_topics, small_cases, worker_env

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]


@pytest.fixture
def gate() -> Iterator[Gate]:
    """The way to moto's KMS server, which the test cuts and restores."""
    with aws_credentials(), moto_server() as port:
        opened = Gate(port)
        yield opened
        opened.close()


def test_a_key_service_away_refuses_with_a_retryable_reason_and_the_same_key_once_it_is_back_is_decided(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, gate: Gate
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1, tenant="acme")[0]
    provider = (f"aws-kms:?region={REGION}&alias_prefix=dpm/{topic_names.prefix}"
                f"&endpoint=http://127.0.0.1:{gate.port}&timeout_s=2")  # fmt: skip
    keys = {"DPM_KEK_PROVIDER": provider, "DPM_KEYS_DIR": os.environ["DPM_KEYS_DIR"]}
    settings = Settings.from_env({"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix,
                                  "DPM_HOME": str(tmp_path), **keys})  # fmt: skip
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), **CREDENTIALS, **keys, "DPM_KEY_SERVICE_WAIT_S": "3"}
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append_many("case-1", [(e.kind, e.text) for e in case.trajectory.events])  # its key wrapped by KMS
        with pipeline_processes([["worker"]], env, tmp_path / "logs"):
            gate.shut()  # the worker has never opened this case: it must ask KMS, which no longer answers
            with pytest.raises(KeyServiceUnavailableError):  # a new case's key cannot be wrapped: nothing appended
                memory.append("case-2", kind="document", text="a first step, whose case has no data key yet")
            with pytest.raises(DecisionRefusedError) as refused:
                memory.decide("case-1", task=case.task, budget=2_000, timeout=120, idempotency_key="ask-1")
            gate.reopen()
            time.sleep(3)  # the worker refuses the tenant at once for DPM_KEY_SERVICE_WAIT_S after giving up
            decision = memory.decide("case-1", task=case.task, budget=2_000, timeout=120, idempotency_key="ask-1")
            again = memory.decide("case-1", task=case.task, budget=2_000, timeout=60, idempotency_key="ask-1")
    assert refused.value.reason == "key-service-unavailable"
    assert refused.value.retryable
    assert f"AWS KMS ({REGION}, http://127.0.0.1:{gate.port})" in refused.value.detail, refused.value.detail
    assert decision.decision_id == again.decision_id == refused.value.decision_id
    assert decision.label in case.task.label_space
    published = [r.key for r in committed_records(kafka_config, topic_names.decisions, 1)]
    assert published == [decision.decision_id.encode()]  # decided once, after the refusal that bound nothing
    log = (tmp_path / "logs" / "worker-0.log").read_text()
    assert "dead-lettered key-service-unavailable" in log
    assert "erased" not in log  # a key service away is never an erasure
