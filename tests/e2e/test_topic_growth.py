"""Growing the topics partitioned by case (`dpm topics grow`) on a live pipeline, and what must not go wrong.

Cases are decided by both architectures on 2 partitions; the growth takes the pipeline to 5 in a
new generation. The running worker and baseline member stop on their own when the layout changes;
restarted, they decide new triggers on the new generation. Every case's events are in one
partition of the new events topic, in their old order; decisions made before the growth still
replay MATCH against the generation they read; erasure reaches every generation; a growth on a
pipeline with triggers pending is refused; partitions added with the admin API
(`kafka-topics --alter`) stop producers and workers with a clear error.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import NewPartitions

from pipeline.config.settings import keys_folder
from pipeline.core.case import Case
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.layout import LayoutError, read_layout
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import dpm_cli

pytestmark = pytest.mark.e2e

BUDGET = 900
BOTH = (Architecture.DPM, Architecture.SUMM)


def _members(tag: str) -> list[list[str]]:
    return [["worker", "--worker-id", f"w-{tag}"], ["baseline", "--budgets", str(BUDGET), "--worker-id", f"b-{tag}"]]


def _requests(cases: list[Case], positions: dict[CaseRef, tuple[LogPosition, ...]], tag: str) -> list[DecisionRequest]:
    return [DecisionRequest(f"{tag}-{n}", c.ref, c.task, BUDGET, BOTH, positions[c.ref], len(positions[c.ref]))
            for n, c in enumerate(cases)]  # fmt: skip


def _by_case(config: dict[str, str], topic: str) -> dict[str, list[tuple[int, int, bytes | None, bytes | None]]]:
    """Each case's records of an events topic: (partition, offset, key, value) in offset order."""
    found: dict[str, list[tuple[int, int, bytes | None, bytes | None]]] = defaultdict(list)
    for r in read_topic(config, topic):
        case = b"/".join((r.key or b"").split(b"/")[:2]).decode()
        found[case].append((r.position.partition, r.position.offset, r.key, r.value))
    return found


def _exited(procs: list, timeout_s: float) -> list[int | None]:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.5)
    return [p.poll() for p in procs]


@pytest.mark.timeout(600)
# The copy and the cut-over are ours (plain topic creation, produce and consume): on 3.9.2 only; the
# refusals of an outside change, which read partition counts, run on both releases.
@pytest.mark.any_broker
def test_a_growth_keeps_every_case_in_order_and_old_decisions_replay_on_the_generation_they_read(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path,
    case_keys: CaseKeys, keys_dir: Path,
) -> None:  # fmt: skip
    create_topics(kafka_config, topic_names, partitions=2)
    cases = small_cases(per_domain=1)
    producer = EventProducer(kafka_config, topic_names, cipher=case_keys)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    cli_env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    before = _requests(cases, positions, "before")
    with pipeline_processes(_members("g1"), env, tmp_path / "g1") as first:
        producer.triggers(before)
        await_decisions(kafka_config, topic_names, 2 * len(before), timeout_s=180, cipher=case_keys)

        pending = dpm_cli("topics", "grow", "--partitions", "5", "--settle", "0", env=cli_env)
        assert pending.returncode == 0, pending.stdout[-2000:] + pending.stderr[-2000:]
        assert "generation 1 -> 2" in pending.stdout
        codes = _exited(first, 90)
        assert None not in codes, "the members did not stop when the layout changed"
    producer.close()

    grown = topic_names.of_generation(2)
    layout = read_layout(kafka_config, topic_names)
    assert layout is not None
    assert (layout.generation, layout.partitions) == (2, 5)
    old, new = _by_case(kafka_config, topic_names.events), _by_case(kafka_config, grown.events)
    assert set(new) == set(old)
    for case in cases:
        copied = new[case.ref.key]
        assert {p for p, *_ in copied} == {case_partition(case.ref, 5)}, "a case sits in one partition"
        assert [(k, v) for *_, k, v in copied] == [(k, v) for *_, k, v in old[case.ref.key]], "same records, same order"

    grown_keys = kafka_case_keys(
        kafka_config, grown.keys, LocalFileKeyProvider(keys_folder(keys_dir, topic_names.prefix))
    )
    producer = EventProducer(kafka_config, topic_names, cipher=grown_keys)  # writes the current generation
    after_positions = {c.ref: tuple(LogPosition(p, o) for p, o, *_ in new[c.ref.key]) for c in cases}
    after = _requests(cases, after_positions, "after")
    with pipeline_processes(_members("g2"), env, tmp_path / "g2"):
        producer.triggers(after)
        outputs = await_decisions(kafka_config, topic_names, 2 * (len(before) + len(after)), timeout_s=240,
                                  cipher=grown_keys)  # fmt: skip
    producer.close()
    assert outputs.duplicates == 0
    read_from: dict[str, set[str | None]] = defaultdict(set)
    for d in outputs.decisions.values():
        read_from[d.decision_id.trigger_id.split("-")[0]].add(d.events_topic)
    assert read_from == {"before": {topic_names.events}, "after": {grown.events}}

    replay = dpm_cli("replay", "--all", env=cli_env)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    assert replay.stdout.count("MATCH") == 2 * (len(before) + len(after))

    erased = cases[0].ref
    erasure = dpm_cli("erase", "--tenant", erased.tenant, "--case", erased.case_id, env=cli_env)
    assert erasure.returncode == 0, erasure.stdout + erasure.stderr
    _assert_erased(kafka_config, (topic_names, grown), erased.key, len(cases[0].trajectory.events))
    grown_keys.close()


def _assert_erased(kafka_config: dict[str, str], generations: tuple[TopicNames, ...], key: str, events: int) -> None:
    """Every generation's events of the case are tombstones, and its key records a tombstone or the erased marker."""
    for names in generations:
        latest = {k: v for *_, k, v in _by_case(kafka_config, names.events)[key]}
        assert len(latest) == events, names.events
        assert set(latest.values()) == {None}, names.events
        last = {r.key: r.value for r in read_topic(kafka_config, names.keys)}[key.encode()]
        erased_only = last is None or orjson.loads(last)["schema"] == "dpm.key_erased.v1"  # neither holds key material
        assert erased_only, f"the data key of {key} is left in {names.keys}"


def test_partitions_added_outside_a_growth_are_refused_by_producers_workers_and_growth_but_not_by_erasure(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=2)
    cli_env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    assert dpm_cli("topics", "create", "--partitions", "2", env=cli_env).returncode == 0  # records the layout
    first, second = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names)
    producer.append(first.trajectory.events)
    producer.close()
    admin = admin_client(kafka_config)  # kept referenced until its future is done
    admin.create_partitions([NewPartitions(topic_names.events, 4)])[topic_names.events].result(timeout=30)

    producer = EventProducer(kafka_config, topic_names)
    with pytest.raises(LayoutError, match="has 4 partitions, but its layout records 2"):
        producer.append(second.trajectory.events)
    producer.close()
    erasure = dpm_cli("erase", "--tenant", first.ref.tenant, "--case", first.ref.case_id, env=cli_env)
    assert erasure.returncode == 0, erasure.stdout + erasure.stderr  # the right to erasure does not wait
    latest = {r.key: r.value for r in read_topic(kafka_config, topic_names.events)}
    assert len(latest) == len(first.trajectory.events)
    assert set(latest.values()) == {None}
    worker = dpm_cli("worker", "--worker-id", "w", env={**worker_env(kafka_bootstrap, topic_names, tmp_path)},
                     timeout_s=120)  # fmt: skip
    assert worker.returncode != 0
    assert "partitions were changed outside `dpm topics grow`" in worker.stdout + worker.stderr
    growth = dpm_cli("topics", "grow", "--partitions", "8", "--settle", "0", env=cli_env)
    assert growth.returncode != 0
    assert "kafka-topics --alter" in growth.stdout + growth.stderr


def test_a_growth_with_triggers_pending_changes_nothing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, case_keys: CaseKeys, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=2)
    cases = small_cases(per_domain=1)[:1]
    producer = EventProducer(kafka_config, topic_names, cipher=case_keys)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker", "--worker-id", "w"]], env, tmp_path / "w"):  # the group has run
        producer.triggers(_requests(cases, positions, "decided"))
        await_decisions(kafka_config, topic_names, 1, timeout_s=120, cipher=case_keys)
    producer.triggers(_requests(cases, positions, "waiting"))  # nobody decides it
    producer.close()
    cli_env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    growth = dpm_cli("topics", "grow", "--partitions", "4", "--settle", "0", env=cli_env)
    assert growth.returncode != 0
    assert "not quiet" in growth.stdout + growth.stderr
    assert "1 trigger(s)" in growth.stdout + growth.stderr
    layout = read_layout(kafka_config, topic_names)
    assert layout is not None
    assert layout.generation == 1
    assert not [t for t in topic_names.of_generation(2).case_partitioned() if t in _topics(kafka_config)]


def _topics(config: dict[str, str]) -> set[str]:
    return set(admin_client(config).list_topics(timeout=10).topics)
