"""`dpm whatif` and `dpm explain --decisive --reasons` on published decisions, through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.bench.generate import GenerationSpec, generate_cases
from pipeline.client import DecisionMemory, NotAdverseError
from pipeline.core.case import Case
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.contest import ContestRecord
from pipeline.wire.event import CaseOpening
from pipeline.wire.sealing import CaseErasedError
from pipeline.wire.trigger import DecisionRequest
from tests.integration.test_client_appends import client_settings
from tests.pipeline_support import create_topics, worker_env
from tests.processes import dpm_cli

# Contests are our code over our records: no broker release changes them (left out of make test-kafka4).
pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]

BUDGET = 900


def _json(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    ran = dpm_cli(*args, "--json", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    value = orjson.loads(ran.stdout)
    assert isinstance(value, dict)
    return value


def _refused(args: list[str], env: dict[str, str], message: str) -> None:
    ran = dpm_cli(*args, env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert message in ran.stderr, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr  # one clear line


def _decided(kafka_bootstrap: str, config: dict[str, str], names: TopicNames, tmp_path: Path, keys: CaseKeys,
             cases: list[Case]) -> dict[str, str]:  # fmt: skip
    create_topics(config, names)
    producer = EventProducer(config, names, keys)
    for case in cases:
        positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
        producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, BUDGET, tuple(Architecture),
                                         positions, len(positions)))  # fmt: skip
    producer.close()
    env = worker_env(kafka_bootstrap, names, tmp_path)
    with pipeline_processes([["worker"], ["baseline", "--budgets", str(BUDGET)]], env, tmp_path / "logs"):
        await_decisions(config, names, 2 * len(cases), timeout_s=180, cipher=keys)
    return env


def test_a_decision_is_contested_recorded_replayed_and_never_touched(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    approved, denied = generate_cases(GenerationSpec(domains=("loan",), per_domain=2, events=(24, 30),
                                                     chars=(6_000, 7_500), tenant="contest"))  # fmt: skip
    assert (approved.label, denied.label) == ("APPROVE", "DENY")
    env = _decided(kafka_bootstrap, kafka_config, topic_names, tmp_path, case_keys, [approved, denied])
    before = load_outputs(kafka_config, topic_names, cipher=case_keys)
    yes = f"{approved.ref.case_id}:dpm"

    analysis = _json(["explain", "--decision", yes, "--decisive"], env)
    assert analysis["label"] == "APPROVE"
    assert analysis["decisive"], "an approval rests on evidence: leaving some of it out changes it"
    assert set(map(tuple, analysis["decisive"])) <= set(map(tuple, analysis["tested"]))
    assert analysis["calls"] <= analysis["from_scratch_calls"]
    for group in analysis["decisive"]:  # each reported group, left out, changes the decision
        drop = ",".join(map(str, group))
        changed = _json(["whatif", "--decision", yes, "--drop", drop, "--why", "applicant disputes the record"], env)
        assert (changed["original_label"], changed["changed"]) == ("APPROVE", True), changed
    facts = _json(["explain", "--decision", yes], env)["facts"]
    cited = {i for fact in facts for i in fact["citations"]}
    uncited = min(set(range(1, len(approved.trajectory) + 1)) - cited)
    kept = _json(["whatif", "--decision", yes, "--drop", str(uncited)], env)
    assert (kept["changed"], kept["facts_added"], kept["facts_removed"]) == (False, [], []), kept
    summ = _json(["whatif", "--decision", f"{approved.ref.case_id}:summ", "--drop", str(len(approved.trajectory))],
                 env)  # fmt: skip
    assert summ["calls"] < summ["from_scratch_calls"]  # folds again only from the changed event on

    reasons = _json(["explain", "--decision", f"{denied.ref.case_id}:dpm", "--reasons"], env)["reasons"]
    assert reasons["heading"].startswith("Principal reasons for the adverse action")
    assert reasons["reasons"]
    assert all(r["changes_decision"] or r["in_notice"] for r in reasons["reasons"])
    text = dpm_cli("explain", "--decision", f"{denied.ref.case_id}:dpm", "--reasons", env=env)
    assert "they are not legal advice" in text.stdout, text.stdout + text.stderr
    _refused(["explain", "--decision", yes, "--reasons"], env, "does not mark adverse")
    with DecisionMemory("contest", settings=client_settings(kafka_bootstrap, topic_names, tmp_path)) as memory:
        given = memory.reasons(f"{denied.ref.case_id}:dpm")  # the client library's, computed the same way
        with pytest.raises(NotAdverseError):
            memory.reasons(yes)
    assert [(r.rank, r.fact.text) for r in given.reasons] == [(r["rank"], r["fact"]) for r in reasons["reasons"]]

    listed = _json(["explain", "--decision", yes], env)["contests"]
    assert len(listed) == 1 + len(analysis["decisive"]) + 1  # the analysis, each group's what-if, the uncited one
    assert {c["replay"] for c in listed} == {"MATCH"}, listed
    with DecisionMemory("contest", settings=client_settings(kafka_bootstrap, topic_names, tmp_path)) as memory:
        through_client = memory.contests(yes)  # the client library's list: the same contests, the same verdicts
        assert memory.contests(f"{denied.ref.case_id}:dpm")[0].kind == "reasons"
    assert [(c.contest_id, c.kind, c.replay) for c in through_client] == [
        (c["contest_id"], c["kind"], c["replay"]) for c in listed
    ]
    after = load_outputs(kafka_config, topic_names, cipher=case_keys)
    assert after.decisions == before.decisions  # contests publish on their own topic only
    replayed = dpm_cli("replay", "--all", env=env)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.count("MATCH") == 4, replayed.stdout


def test_bad_contests_are_one_line_each_and_publish_nothing_and_an_erased_case_computes_nothing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    case = generate_cases(GenerationSpec(domains=("claim",), per_domain=1, events=(24, 30), chars=(6_000, 7_500),
                                         tenant="contest"))[0]  # fmt: skip
    env = _decided(kafka_bootstrap, kafka_config, topic_names, tmp_path, case_keys, [case])
    decision = f"{case.ref.case_id}:dpm"
    size = len(case.trajectory)
    not_json = tmp_path / "not-json.txt"
    not_json.write_text("Appraisal report, amended")
    no_text = tmp_path / "no-text.json"
    no_text.write_text('{"kind": "document"}')
    bad_kind = tmp_path / "bad-kind.json"
    bad_kind.write_bytes(orjson.dumps({"kind": "doc\u0001ument", "text": "Appraisal report, amended"}))
    for args, message in (
        (["whatif", "--decision", "nobody:dpm", "--drop", "1"], "no published decision nobody:dpm"),
        (["whatif", "--decision", decision, "--drop", str(size + 1)], f"whose events are [1] to [{size}]"),
        (["whatif", "--decision", decision, "--drop", "x"], "'x' is not an event index"),
        (["whatif", "--decision", decision], "say what changes"),
        (["whatif", "--decision", decision, "--replace", f"2={not_json}"], "is not JSON"),
        (["whatif", "--decision", decision, "--replace", f"2={no_text}"], "is not a replacement event"),
        (["whatif", "--decision", decision, "--replace", f"2={bad_kind}"], "is not a valid event"),
        (["whatif", "--decision", decision, "--drop", "1", "--max-calls", "0"], "call budget of 0"),
    ):  # fmt: skip
        _refused(args, env, message)
    assert list(read_topic(kafka_config, topic_names.contests)) == [], "nothing published"
    admin = admin_client(kafka_config)  # kept referenced: its futures fail once the client is gone
    for deleted in admin.delete_topics([topic_names.contests]).values():
        deleted.result(30)  # a pipeline made before contests were recorded
    _refused(["whatif", "--decision", decision, "--drop", "1"], env, "does not exist: `dpm topics create`")
    assert dpm_cli("topics", "create", "--partitions", "3", env=env).returncode == 0  # adds it

    replaced = tmp_path / "replacement.json"
    replaced.write_text(
        orjson.dumps({"kind": "document", "text": case.trajectory.by_index(2).text + " Amended."}).decode()
    )
    assert _json(["whatif", "--decision", decision, "--replace", f"2={replaced}"], env)["calls"] >= 1
    [published] = list(read_topic(kafka_config, topic_names.contests))
    assert b"Amended." not in (published.value or b"")  # sealed under the case's data key
    assert str(ContestRecord.decode(published.value, case_keys).changes[0].text).endswith("Amended.")

    erased = dpm_cli("erase", "--tenant", case.ref.tenant, "--case", case.ref.case_id, env=env)
    assert erased.returncode == 0, erased.stdout + erased.stderr
    _refused(["whatif", "--decision", decision, "--drop", "1"], env, "ERASED, nothing computed")
    _refused(["explain", "--decision", decision, "--decisive"], env, "ERASED, nothing computed")
    case_keys.sync()
    with pytest.raises(CaseErasedError):  # the contest went with the case
        ContestRecord.decode(published.value, case_keys)
    assert len(list(read_topic(kafka_config, topic_names.contests))) == 1  # and nothing was added


def test_a_million_character_case_is_contested_published_split_where_it_must_be_and_replays_match(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    # A contest once kept each re-decision's whole request (the case's prompt): this case's decisive analysis
    # made a 1.2 MB record, which the producer refused (MSG_SIZE_TOO_LARGE).
    [case] = [c for c in generate_cases(GenerationSpec(domains=("loan",), per_domain=2, events=(400, 400),
                                                       chars=(1_000_000, 1_000_000), tenant="contest"))
              if c.label == "APPROVE"]  # fmt: skip
    assert sum(len(e.text) for e in case.trajectory.events) >= 1_000_000
    create_topics(kafka_config, topic_names)
    producer = EventProducer(kafka_config, topic_names, case_keys)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
    producer.trigger(DecisionRequest(case.ref.case_id, case.ref, case.task, BUDGET, (Architecture.DPM,), positions,
                                     len(positions)))  # fmt: skip
    producer.close()
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker"]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 1, timeout_s=180, cipher=case_keys)
    decision = f"{case.ref.case_id}:dpm"

    analysis = _json(["explain", "--decision", decision, "--decisive"], env)
    assert analysis["calls"] >= 20, analysis  # enough answers that whole requests passed the limit
    assert analysis["decisive"], analysis
    [head] = list(read_topic(kafka_config, topic_names.contests))
    assert len(head.value or b"") < 200_000  # the answers whole, each request as its digest

    # Under a small record limit the same analysis goes out in parts, and its head lists them.
    small = tmp_path / "small-records.properties"
    small.write_text("message.max.bytes=40000\n")
    limited = {**env, "DPM_KAFKA_CONFIG": str(small)}
    again = _json(["explain", "--decision", decision, "--decisive"], limited)
    assert again["decisive"] == analysis["decisive"]
    drop = ",".join(map(str, analysis["decisive"][0]))
    changed = _json(["whatif", "--decision", decision, "--drop", drop], limited)
    assert changed["changed"], changed
    published = list(read_topic(kafka_config, topic_names.contests))
    assert len(published) > 3, "the second analysis was split into parts"
    # partitioned like the outputs, the topic is read partition by partition: the first head is found by its key
    assert all(len(r.value or b"") <= 40_000 for r in published if r.key != head.key)
    assert any(b"/part/" in (r.key or b"") for r in published)

    listed = _json(["explain", "--decision", decision], env)["contests"]
    assert len(listed) == 3, listed
    assert {c["replay"] for c in listed} == {"MATCH"}, listed
