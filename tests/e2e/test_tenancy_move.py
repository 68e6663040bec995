"""A tenant with cases on the shared topics cannot be given topics of its own until those cases are gone.

Moving a case between the modes is not supported (its events, data key and the baseline's folded state
are on the shared topics, and the baseline took the same case id on new topics for erased): `dpm tenants
add` refuses, naming the cases, and accepts once they are erased on the shared topics.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.wire.event import CaseOpening
from tests.pipeline_support import create_topics, small_cases
from tests.processes import dpm_cli

# What this proves is dpm tenants add's own check,
# which no broker release changes: `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker


def test_a_tenant_with_cases_on_the_shared_topics_is_refused_until_they_are_erased(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, case_keys: CaseKeys, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    cases = small_cases(per_domain=1, tenant="mover")[:2]
    producer = EventProducer(kafka_config, topic_names, case_keys)  # seals: each case gets a data key
    for case in cases:
        producer.append(case.trajectory.events, CaseOpening(case.task, (900,)))
    producer.close()
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix, "DPM_HOME": str(tmp_path)}
    by_topic = {**env, "DPM_TENANCY": "topics", "DPM_TENANT_PARTITIONS": "3"}
    refused = dpm_cli("tenants", "add", "mover", env=by_topic)
    assert refused.returncode == 1
    ids = sorted(c.ref.case_id for c in cases)
    assert f"tenant 'mover' has 2 case(s) on the shared topics ({', '.join(ids)})" in refused.stderr
    assert "a case cannot move to topics of its own" in refused.stderr
    assert not [line for line in dpm_cli("tenants", "list", env=by_topic).stdout.splitlines() if "mover" in line]
    erased = dpm_cli("erase", "--tenant", "mover", env=env)  # on the shared topics
    assert erased.returncode == 0, erased.stderr
    added = dpm_cli("tenants", "add", "mover", env=by_topic)
    assert added.returncode == 0, added.stderr
    assert f"created {topic_names.of_tenant('mover').events}" in added.stdout
