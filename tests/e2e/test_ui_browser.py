"""`dpm ui` in a real browser (the system's Chromium, driven by Playwright) over a real pipeline run.

Opens the list, a decision, follows a citation to its event, replays, checks that one tenant cannot
reach another's decision, erases a case and sees it erased. Screenshots go to out/ui-screenshots/.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect

from pipeline.core.case import Case
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionId, DecisionRequest
from tests.conftest import free_port
from tests.pipeline_support import small_cases, worker_env
from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

BUDGET = 900
SHOTS = Path("out/ui-screenshots")


def _await_indexed(base: str, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:  # noqa: S310 - loopback
                if int(answer.read().decode().split()[1]) >= count:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "dpm ui did not index the decisions in time"
        time.sleep(0.5)


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=name != "decision")


@dataclass(frozen=True)
class _Run:
    """Two tenants' cases, each decided by both architectures, and a `dpm ui` serving them."""

    ours: Case
    theirs: Case
    our_token: str
    env: dict[str, str]
    base: str

    def dpm_id(self, case: Case) -> DecisionId:
        return DecisionId(f"t-{case.ref.tenant}", Architecture.DPM)


def _produce(config: dict[str, str], names: TopicNames, keys: CaseKeys, cases: tuple[Case, ...]) -> None:
    producer = EventProducer(config, names, keys)
    both = (Architecture.DPM, Architecture.SUMM)
    for case in cases:
        positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
        producer.trigger(DecisionRequest(f"t-{case.ref.tenant}", case.ref, case.task, BUDGET, both, positions,
                                         len(positions)))  # fmt: skip
    producer.close()


def test_an_auditor_follows_a_decision_to_its_evidence_replays_it_and_sees_only_their_tenant(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path,
    case_keys: CaseKeys, browser: Browser,
) -> None:  # fmt: skip
    create_pipeline_topics(kafka_config, topic_names, 3, replication=1)
    suffix = uuid.uuid4().hex[:6]
    ours, theirs = small_cases(per_domain=1, tenant=f"acme-{suffix}")[0], small_cases(1, f"globex-{suffix}")[0]
    _produce(kafka_config, topic_names, case_keys, (ours, theirs))
    our_token, port = f"token-{uuid.uuid4().hex}", free_port()
    tokens = f"{ours.ref.tenant}={our_token},{theirs.ref.tenant}=token-{uuid.uuid4().hex}"
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_UI_REFRESH_S": "0.5", "DPM_UI_TOKENS": tokens,
           "DPM_UI_CONTEST": "all"}  # fmt: skip
    run = _Run(ours, theirs, our_token, env, f"http://127.0.0.1:{port}")
    commands = [["worker"], ["baseline", "--budgets", str(BUDGET)], ["ui", "--port", str(port)]]
    with pipeline_processes(commands, env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 4, timeout_s=180, cipher=case_keys)
        _await_indexed(run.base, 4)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        _sign_in_and_list(page, run)
        _open_decision_and_follow_a_citation(page, run)
        _replay(page)
        _contest(page)
        assert len(list(read_topic(kafka_config, topic_names.contests))) == 2  # each contest recorded
        _refused_the_other_tenant(page, run)
        _erase_and_see_it_erased(page, run)
        page.close()


def _sign_in_and_list(page: Page, run: _Run) -> None:
    page.goto(f"{run.base}/decisions")
    expect(page).to_have_url(f"{run.base}/login?next=/decisions")
    page.fill("input[name=token]", run.our_token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Decisions")
    expect(page.locator("tbody tr")).to_have_count(2)  # our DPM and Summ-only decisions only
    assert run.theirs.ref.tenant not in page.content()
    _shot(page, "list")


def _open_decision_and_follow_a_citation(page: Page, run: _Run) -> None:
    page.click(f"text={run.dpm_id(run.ours)}")
    expect(page.locator("h1")).to_have_text(str(run.dpm_id(run.ours)))
    expect(page.locator("#other-decision")).to_contain_text("same trigger")
    expect(page.locator("details.audit")).to_have_count(2)
    assert not page.locator("details.audit").first.evaluate("d => d.open")  # collapsed by default
    _shot(page, "decision")
    citation = page.locator("a.cite").first
    target = citation.get_attribute("href")
    assert target is not None
    citation.click()
    assert page.url.endswith(target)
    event = page.locator(target)
    expect(event).to_be_in_viewport()
    expect(event.locator("mark").first).to_be_visible()  # the fact's figure, highlighted in the event
    _shot(page, "citation")


def _replay(page: Page) -> None:
    page.click("text=Replay now")
    expect(page.locator("#replay-result")).to_contain_text("MATCH")
    _shot(page, "replay")


def _contest(page: Page) -> None:
    """Decisive events, shown on the page and linked to their evidence; then a what-if without the first of them."""
    page.click("text=Find decisive events")
    result = page.locator("#contest-result")
    expect(result).to_contain_text("Recorded as contest")
    decisive = result.locator("a.decisive")
    left_out = decisive.first.inner_text().strip("[]") if decisive.count() else "1"
    page.fill("input[name=drop]", left_out)
    page.fill("input[name=why]", "the applicant disputes this record")
    page.click("text=What if")
    expect(page.locator("#contest-result")).to_contain_text(f"What if (leave out [{left_out}])")
    _shot(page, "contest")


def _refused_the_other_tenant(page: Page, run: _Run) -> None:
    theirs = quote(str(run.dpm_id(run.theirs)))
    for path in (f"/decision?id={theirs}", f"/decision?tenant={run.theirs.ref.tenant}&id={theirs}",
                 f"/decisions?tenant={run.theirs.ref.tenant}"):  # fmt: skip
        answer = page.goto(f"{run.base}{path}")
        assert answer is not None
        assert answer.status in (403, 404)
        assert run.theirs.ref.case_id not in page.content()
    _shot(page, "other-tenant")


def _erase_and_see_it_erased(page: Page, run: _Run) -> None:
    erased = dpm_cli("erase", "--tenant", run.ours.ref.tenant, "--case", run.ours.ref.case_id, env=run.env)
    assert erased.returncode == 0, erased.stdout + erased.stderr
    deadline = time.monotonic() + 30
    while True:
        page.goto(f"{run.base}/decision?id={quote(str(run.dpm_id(run.ours)))}")
        if "ERASED: case" in page.content():  # the erased page (every page's stylesheet names ERASED)
            break
        assert time.monotonic() < deadline, "the erased case still shows content"
        time.sleep(0.5)
    assert run.ours.trajectory.events[0].text not in page.content()
    _shot(page, "erased")
