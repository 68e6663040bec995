"""A rolling upgrade: the previous release and this one share each consumer group while triggers flow.

The previous release is the last one in releases.json, taken from this repository's history
(`git archive` of its commit) and installed into a virtual environment of its own. One projection
worker and one baseline member of each release join the same groups; triggers for both
architectures flow, and a trigger of a schema version neither knows is among them; then the
previous release's members stop (the upgrade's last step) and more triggers come. Every trigger is
decided exactly once, the unknown one is dead-lettered `schema`, nothing crashes, and this release
replays every decision of both, MATCH.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
from io import BytesIO
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from benchmarks.runs import await_group, balanced
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import await_dead_letters, committed_records, create_topics, small_cases, worker_env
from tests.processes import dpm_cli

pytestmark = pytest.mark.release

ROOT = Path(__file__).parents[2]
BUDGET = 900
PREVIOUS = orjson.loads((ROOT / "releases.json").read_bytes())["releases"][-1]


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a virtual environment holding the previous release, installed from its commit."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the previous release is taken from the repository's history: a git checkout is needed")
    root = tmp_path_factory.mktemp(f"release-{PREVIOUS['version']}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS["commit"]],
                             capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root / "src", filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    # The release's own package in its own environment, its dependencies those this one installed (a .pth naming
    # our site-packages): installing them again took most of a minute. `pip check` then holds that every
    # dependency the release declares is satisfied by what it runs on.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(site) / "dpm-shared-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(root / "src")],
                               capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    checked = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert "dpm-pipeline" not in checked.stdout.lower(), checked.stdout  # other lines: wheels we install --no-deps
    return python


def _requests(cases: list, positions: dict, prefix: str, count: int) -> list[DecisionRequest]:  # type: ignore[type-arg]
    both = (Architecture.DPM, Architecture.SUMM)
    return [DecisionRequest(f"{prefix}{n}", c.ref, c.task, BUDGET, both, positions[c.ref], len(positions[c.ref]))
            for n, c in enumerate(cases[n % len(cases)] for n in range(count))]  # fmt: skip


@pytest.mark.timeout(900)  # installing the previous release, then a baseline member taking over its partner's tables
def test_members_of_two_releases_share_their_groups_and_every_trigger_is_decided_once(
    previous_release: Path, kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames,
    tmp_path: Path, case_keys: CaseKeys,
) -> None:  # fmt: skip
    create_topics(kafka_config, topic_names, partitions=3)
    cases = small_cases(per_domain=2)
    producer = EventProducer(kafka_config, topic_names, cipher=case_keys)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in cases}
    spread = balanced(cases, 16, partitions=3)  # every partition that holds a case, so every member gets work
    during, after = _requests(spread, positions, "mixed-", 16), _requests(cases, positions, "upgraded-", 8)
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "PYTHONPATH": ""}
    members = [["worker", "--worker-id", "w-old"], ["baseline", "--budgets", str(BUDGET), "--worker-id", "b-old"]]
    current = [["worker", "--worker-id", "w-new"], ["baseline", "--budgets", str(BUDGET), "--worker-id", "b-new"]]
    with (
        pipeline_processes(members, env, tmp_path / "previous", python=str(previous_release), cwd=tmp_path) as old,
        pipeline_processes(current, env, tmp_path / "current"),
    ):
        for group in (f"{topic_names.prefix}-projection", f"{topic_names.prefix}-baseline"):
            await_group(kafka_config, group, members=2, timeout_s=180)  # both releases hold partitions of each
        producer.triggers(during)
        unknown = {**during[0].to_wire(), "schema": "dpm.trigger.v9", "trigger_id": "from-the-future"}
        raw = Producer(kafka_config)
        raw.produce(topic_names.triggers, key=during[0].case.key.encode(), value=orjson.dumps(unknown))
        raw.flush(10)
        await_decisions(kafka_config, topic_names, 2 * len(during), timeout_s=240, cipher=case_keys)
        assert all(p.poll() is None for p in old), "the previous release's members are still running"
        for proc in old:  # the upgrade's last step: the previous release's members leave
            proc.terminate()
            proc.wait(60)
        producer.triggers(after)
        producer.close()
        outputs = await_decisions(kafka_config, topic_names, 2 * (len(during) + len(after)), timeout_s=240,
                                  cipher=case_keys)  # fmt: skip
    expected = {r.decision_key(a) for r in (*during, *after) for a in Architecture}
    assert set(outputs.decisions) == expected
    assert outputs.duplicates == 0
    by = {r.worker_id for r in outputs.decisions.values()}
    assert {"w-old", "w-new", "b-old", "b-new"} <= by, f"members of both releases decided: {sorted(by)}"
    schemas = {orjson.loads(r.value or b"")["schema"] for r in committed_records(kafka_config, topic_names.decisions,
                                                                                 len(expected))}  # fmt: skip
    assert schemas == {SchemaId.DECISION_V1.value, SchemaId.DECISION.value}
    assert await_dead_letters(kafka_config, topic_names, 1, timeout_s=30) == [("schema", "from-the-future")]
    for mode in ((), ("--verify-recorded",)):
        replay = dpm_cli("replay", "--all", *mode, env={"DPM_BOOTSTRAP": kafka_bootstrap,
                                                         "DPM_TOPIC_PREFIX": topic_names.prefix})  # fmt: skip
        assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
        assert replay.stdout.count("MATCH") == len(expected)
