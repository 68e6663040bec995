"""The auditor's pages without a broker: tenant isolation on every route, the decision page, sign-in, the index."""

from __future__ import annotations

import html
import re
import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from pipeline.config.settings import Settings, SettingsError, UiSettings
from pipeline.core.case import Case
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.explanation import fact_rows
from pipeline.core.run import RunResult, run_dpm, run_summ
from pipeline.core.task import Budget
from pipeline.core.verification import ReplayReport, verify_replay
from pipeline.core.view import Fact, MemoryView
from pipeline.core.window import Window
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services.audit_index import (
    Cursor,
    DecisionFilter,
    ErasedDecision,
    IndexedDecision,
    Listed,
    ListPage,
)
from pipeline.services.auditor import CaseEvents
from pipeline.services.contest import ContestAsk, ContestDone, Found, contested_of, run_contest
from pipeline.ui import Tokens, create_app
from pipeline.ui import app as app_module
from pipeline.ui.auth import COOKIE, NoTokensError, Principal
from pipeline.ui.pages import cited_events, marked
from pipeline.ui.server import asgi_app
from pipeline.ui.sessions import Sessions
from pipeline.ui.throttle import Throttle
from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.trigger import DecisionId, DecisionKey
from tests.cases import load_fixture

BUDGET = Budget(900)
ACME, GLOBEX, ADMIN = "acme-token-0123456789", "globex-token-0123456789", "admin-token-0123456789"


def _as_tenant(case: Case, tenant: str) -> Case:
    ref = CaseRef(tenant, case.ref.case_id)
    events = tuple(replace(e, case=ref) for e in case.trajectory.events)
    return replace(case, trajectory=Trajectory(ref, events))


def _published(case: Case, trigger_id: str, result: RunResult) -> RunRecords:
    positions = tuple(LogPosition(0, i) for i in range(len(case.trajectory.events)))
    provenance = Provenance(DecisionId(trigger_id, result.architecture), positions, PositionsSource.TRIGGER,
                            "extractive", "w-1")  # fmt: skip
    return run_records(result, case.trajectory, task=case.task, budget=BUDGET, provenance=provenance)


def _cursor(item: Listed) -> Cursor:
    return (item.decided_ms, str(item.decision_id), item.case.tenant)


def _matches(wanted: DecisionFilter, item: Listed) -> bool:
    label = item.record.outcome.label if isinstance(item, IndexedDecision) else None
    return all((wanted.tenant in (None, item.case.tenant), wanted.case_id in (None, item.case.case_id),
                wanted.architecture in (None, item.decision_id.architecture), wanted.label in (None, label),
                wanted.since_ms is None or item.decided_ms >= wanted.since_ms,
                wanted.until_ms is None or item.decided_ms <= wanted.until_ms))  # fmt: skip


class _Auditor:
    """Two tenants' decisions (DPM and Summ-only for one trigger each) listed from memory; events from memory.

    Its listing pages as the lookup index does (newest first, by cursor: tests/unit/test_index_store.py).
    """

    def __init__(self, trigger_of: str = "t-{tenant}") -> None:
        self.items: dict[DecisionKey, Listed] = {}
        self.cases: dict[CaseRef, Trajectory] = {}
        self.audit_records: dict[DecisionId, list[AuditRecord]] = {}
        self.replays = 0
        self.contested: list[ContestDone] = []
        self.erased_cases: set[CaseRef] = set()  # what the key topic says: erased, whatever the index holds yet
        self.key_topic_down = False
        fixture = load_fixture()
        for n, tenant in enumerate(("acme", "globex")):
            case = _as_tenant(fixture, tenant)
            self.cases[case.ref] = case.trajectory
            for runner in (run_dpm, run_summ):
                result = runner(case.trajectory, case.task, BUDGET, ExtractiveBackend())
                self.add(_published(case, trigger_of.format(tenant=tenant), result), 1_800_000_000_000 + n * 1000)

    def add(self, published: RunRecords, at_ms: int) -> None:
        record = published.decision
        positions = {audit.call_index: LogPosition(0, audit.call_index) for audit in published.audits}
        self.items[record.key] = IndexedDecision(record, at_ms, True, published.view, positions)
        self.audit_records[record.decision_id] = list(published.audits)

    def erase_case(self, case: CaseRef) -> int:
        """The case's decisions listed as erased, their content gone (what erasure leaves in the index)."""
        keys = [k for k, i in self.items.items() if isinstance(i, IndexedDecision) and i.case == case]
        for key in keys:
            self.items[key] = ErasedDecision(key.decision_id, case, self.items[key].decided_ms)
        return len(keys)

    def listing(self, wanted: DecisionFilter, limit: int, *, before: Cursor | None = None,
                after: Cursor | None = None) -> ListPage:  # fmt: skip
        matching = sorted((i for i in self.items.values() if _matches(wanted, i)), key=_cursor, reverse=True)
        if after is not None:
            newer = [i for i in matching if _cursor(i) > after]
            page, more = newer[-limit:], len(newer) > limit
        else:
            older = [i for i in matching if before is None or _cursor(i) < before]
            page, more = older[:limit], len(older) > limit
        first, last = (_cursor(page[0]), _cursor(page[-1])) if page else (None, None)
        return ListPage(tuple(page), first if (after is not None and more) or (after is None and before) else None,
                        last if (after is None and more) or after is not None else None)  # fmt: skip

    def labels(self, tenant: str | None) -> list[str]:
        return sorted({i.record.outcome.label for i in self.items.values() if isinstance(i, IndexedDecision)
                       and i.record.outcome.label and tenant in (None, i.case.tenant)})  # fmt: skip

    def decided(self) -> int:
        return len(self.items)

    def get(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        return self.items.get(DecisionKey(tenant, decision_id))

    def lookup(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        return self.get(tenant, decision_id)

    def erased(self, items: Sequence[IndexedDecision]) -> set[CaseRef]:
        if self.key_topic_down:
            raise KafkaAdapterError("reading the key topic failed: no broker")
        gone = {i.case for i in items} & self.erased_cases
        for case in gone:
            self.erase_case(case)  # as the Kafka auditor marks them in its index
        return gone

    def events(self, item: IndexedDecision) -> CaseEvents:
        assert item.case not in self.erased_cases, "an erased case's events were read"
        return CaseEvents(self.cases[item.case])

    def audits(self, item: IndexedDecision) -> list[AuditRecord]:
        return self.audit_records[item.decision_id]

    def contest(self, item: IndexedDecision, audits: list[AuditRecord], events: CaseEvents,
                ask: ContestAsk) -> ContestDone:  # fmt: skip
        """As the Kafka auditor does, but kept here instead of published."""
        assert item.view is not None
        found = Found(TopicNames("ui"), item.record, contested_of(item.record, item.view.view, events.trajectory),
                      tuple(calls_in_order(audits)))  # fmt: skip
        done = run_contest(Settings.from_env({}), found, ask)
        self.contested.append(done)
        return done

    def replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport:
        assert audits == self.audit_records[item.decision_id]  # the page's own, not read again
        self.replays += 1
        view = item.view.text if item.view else None
        return verify_replay(item.record.replay_target(), self.cases[item.case], view, ExtractiveBackend())


def _get(auditor: _Auditor, tenant: str, decision_id: str) -> IndexedDecision:
    item = auditor.get(tenant, DecisionId.parse(decision_id))
    assert isinstance(item, IndexedDecision)
    return item


@pytest.fixture
def auditor() -> _Auditor:
    return _Auditor()


def _client(auditor: _Auditor, token: str | None = None, ui: UiSettings | None = None) -> TestClient:
    tokens = Tokens({"acme": SecretStr(ACME), "globex": SecretStr(GLOBEX)}, SecretStr(ADMIN))
    client = TestClient(create_app(auditor, tokens, ui), follow_redirects=False)
    if token:
        client.headers["Authorization"] = f"Bearer {token}"
    return client


ACME_DPM, GLOBEX_DPM = "t-acme:dpm", "t-globex:dpm"


def test_without_a_token_pages_redirect_to_sign_in_and_a_wrong_token_is_refused(auditor: _Auditor) -> None:
    anonymous = _client(auditor)
    for path in ("/decisions", f"/decision?id={ACME_DPM}"):
        response = anonymous.get(path)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login")
    assert anonymous.post("/decision/replay", data={"id": ACME_DPM}, headers=SAME_SITE).status_code == 303
    assert _client(auditor, "wrong-token-0123456789").get("/decisions").status_code == 401
    assert anonymous.get("/healthz").text == "ok: 4 decisions indexed"  # no content, no tenant


def test_a_tenant_reaches_none_of_another_tenants_decisions_on_any_route(auditor: _Auditor) -> None:
    acme = _client(auditor, ACME)
    listed = acme.get("/decisions")
    assert listed.status_code == 200
    assert "t-acme:dpm" in listed.text
    assert "t-acme:summ" in listed.text
    assert "globex" not in listed.text
    assert acme.get("/decisions?tenant=globex").status_code == 403
    assert "t-globex" not in acme.get(f"/decisions?case={load_fixture().ref.case_id}").text
    globex_rationale = _get(auditor, "globex", GLOBEX_DPM).record.outcome.rationale
    for response in (acme.get(f"/decision?id={GLOBEX_DPM}"), acme.get("/decision?id=t-globex:summ"),
                     acme.get(f"/decision?tenant=globex&id={GLOBEX_DPM}"),
                     acme.post("/decision/replay", data={"id": GLOBEX_DPM}),
                     acme.post("/decision/replay", data={"tenant": "globex", "id": GLOBEX_DPM})):  # fmt: skip
        assert response.status_code == 404
        assert "globex" not in response.text
        assert globex_rationale not in response.text
    assert auditor.replays == 0
    assert acme.get(f"/decision?id={GLOBEX_DPM}").text == acme.get("/decision?id=nothing:dpm").text  # as unknown
    admin = _client(auditor, ADMIN).get("/decisions")
    assert "t-acme:dpm" in admin.text
    assert "t-globex:dpm" in admin.text


def test_two_tenants_with_the_same_trigger_id_each_see_their_own_decisions_only() -> None:
    auditor = _Auditor(trigger_of="shared")
    assert len(auditor.items) == 4  # one tenant's id never hides the other's decision
    for token, own, other in ((ACME, "acme", "globex"), (GLOBEX, "globex", "acme")):
        client = _client(auditor, token)
        page = client.get("/decision?id=shared:dpm")
        assert page.status_code == 200
        assert f"Tenant {own}" in page.text
        assert f"tenant={own}&amp;id=shared%3Asumm" in page.text  # its own Summ-only decision beside it
        assert other not in page.text
        assert client.get(f"/decision?tenant={other}&id=shared:dpm").status_code == 404
    admin = _client(auditor, ADMIN)
    assert "Tenant globex" in admin.get("/decision?tenant=globex&id=shared:dpm").text
    assert admin.get("/decision?id=shared:dpm").status_code == 404  # the admin names the tenant


def test_the_decision_page_shows_cited_evidence_checks_records_audits_and_the_other_architecture(
    auditor: _Auditor,
) -> None:
    page = _client(auditor, ACME).get(f"/decision?id={ACME_DPM}")
    assert page.status_code == 200
    item = _get(auditor, "acme", ACME_DPM)
    assert item.view is not None
    record = item.record
    assert record.outcome.rationale in page.text.replace("&#39;", "'").replace("&#34;", '"')
    first_cited = item.view.view.facts[0].citations[0]
    assert f'href="#event-{first_cited}"' in page.text
    assert f'id="event-{first_cited}"' in page.text
    assert "<mark>" in page.text  # the cited figures, highlighted in their event
    assert record.view_sha256 in page.text
    assert record.events_sha256 in page.text
    assert "0:0 0:1" in page.text  # the recorded offsets
    assert page.text.count('<details class="audit">') == record.llm_calls  # collapsed by default
    assert "same trigger" in page.text
    assert "/decision?tenant=acme&amp;id=t-acme%3Asumm" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_replay_now_reports_match(auditor: _Auditor) -> None:
    page = _client(auditor, ACME).post("/decision/replay", data={"id": ACME_DPM})
    assert page.status_code == 200
    assert 'class="status-MATCH"' in page.text
    assert auditor.replays == 1


def test_an_erased_case_is_listed_as_erased_with_no_content(auditor: _Auditor) -> None:
    item = _get(auditor, "acme", ACME_DPM)
    rationale = item.record.outcome.rationale
    assert auditor.erase_case(item.case) == 2
    client = _client(auditor, ACME)
    page = client.get(f"/decision?id={ACME_DPM}")
    assert page.status_code == 200
    assert "ERASED: case" in page.text
    assert rationale not in page.text
    assert client.post("/decision/replay", data={"id": ACME_DPM}).status_code == 200
    assert auditor.replays == 0  # nothing to replay: no content is left
    assert client.get("/decisions").text.count('class="erased"') == 2


def test_a_case_erased_by_another_process_serves_no_content_before_the_index_refreshes(auditor: _Auditor) -> None:
    """The key topic says erased, the index still holds the content: every page asks the key topic first."""
    item = _get(auditor, "acme", ACME_DPM)
    assert item.view is not None
    rationale, cited = item.record.outcome.rationale, item.view.view.facts[0].text
    client = _client(auditor, ACME)
    shown = client.get(f"/decision?id={ACME_DPM}")
    assert rationale in shown.text
    auditor.erased_cases.add(item.case)  # `dpm erase` ran in another process: its key tombstone is stored
    page = client.get(f"/decision?id={ACME_DPM}")
    assert page.status_code == 200
    assert "ERASED: case" in page.text
    assert rationale not in page.text
    assert cited not in page.text
    assert client.post("/decision/replay", data={"id": ACME_DPM}).status_code == 200
    assert auditor.replays == 0
    listed = client.get("/decisions")
    assert listed.text.count('class="erased"') == 2  # its DPM and Summ-only decisions, both
    assert isinstance(auditor.get("acme", DecisionId.parse(ACME_DPM)), ErasedDecision)
    assert isinstance(_get(auditor, "globex", GLOBEX_DPM), IndexedDecision)  # another case keeps its content


def test_a_key_topic_that_cannot_be_read_shows_no_content(auditor: _Auditor) -> None:
    auditor.key_topic_down = True
    rationale = _get(auditor, "acme", ACME_DPM).record.outcome.rationale
    client = _client(auditor, ACME)
    for page in (client.get(f"/decision?id={ACME_DPM}"), client.get("/decisions")):
        assert page.status_code == 503
        assert rationale not in page.text
        assert "key topic could not be read" in page.text


SAME_SITE = {"Origin": "http://testserver"}


def _login_form(client: TestClient) -> str:
    """Loads the sign-in page (its anti-forgery cookie lands in the client) and returns the form's token."""
    page = client.get("/login")
    found = re.search(r'name="login_token" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def _sign_in(client: TestClient, token: str, target: str = "/decisions") -> Any:
    form = {"token": token, "next": target, "login_token": _login_form(client)}
    return client.post("/login", data=form, headers=SAME_SITE)


def test_sign_in_sets_a_strict_session_cookie_never_the_token_and_never_redirects_off_site(auditor: _Auditor) -> None:
    client = _client(auditor)
    refused = _sign_in(client, "nope-not-a-token-at-all")
    assert refused.status_code == 401
    assert "not valid" in refused.text
    signed = _sign_in(client, GLOBEX, "//evil.example/x")
    assert signed.status_code == 303
    assert signed.headers["location"] == "/decisions"
    assert signed.headers["cache-control"] == "no-store"
    cookie = signed.headers["set-cookie"]
    assert f"{COOKIE}=" in cookie
    assert GLOBEX not in cookie  # a random session id, never the token itself
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain HTTP here: see the proxy test
    assert "t-globex:dpm" in client.get("/decisions").text
    assert client.get(f"/decision?id={ACME_DPM}").status_code == 404


def test_sign_in_and_replay_refuse_a_foreign_origin_and_a_missing_anti_forgery_token(auditor: _Auditor) -> None:
    client = _client(auditor)
    login_token = _login_form(client)
    form = {"token": ACME, "next": "/decisions", "login_token": login_token}
    assert client.post("/login", data=form, headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.post("/login", data=form).status_code == 403  # neither Origin nor Referer: not from our page
    assert client.post("/login", data={**form, "login_token": "forged"}, headers=SAME_SITE).status_code == 403
    assert _sign_in(client, ACME).status_code == 303
    page = client.get(f"/decision?id={ACME_DPM}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    replay = {"id": ACME_DPM, "csrf": csrf.group(1)}
    assert client.post("/decision/replay", data=replay, headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.post("/decision/replay", data={"id": ACME_DPM}, headers=SAME_SITE).status_code == 403
    assert auditor.replays == 0
    referred = client.post("/decision/replay", data=replay, headers={"Referer": "http://testserver/decision"})
    assert referred.status_code == 200  # the Referer's origin stands in for a missing Origin
    assert client.post("/decision/replay", data=replay, headers=SAME_SITE).status_code == 200
    assert auditor.replays == 2


def test_sign_out_ends_the_session_and_a_session_expires() -> None:
    clock = [1000.0]
    sessions = Sessions(idle_s=60, max_s=600, clock=lambda: clock[0])
    session_id, _ = sessions.start(Principal("acme"))
    clock[0] += 59
    assert sessions.get(session_id) is not None  # each use restarts the idle clock
    clock[0] += 59
    assert sessions.get(session_id) is not None
    clock[0] += 61
    assert sessions.get(session_id) is None  # idle too long
    session_id, _ = sessions.start(Principal("acme"))
    for _ in range(12):
        clock[0] += 55
        sessions.get(session_id)
    assert sessions.get(session_id) is None  # past its maximum age however busy
    auditor = _Auditor()
    client = _client(auditor)
    assert _sign_in(client, ACME).status_code == 303
    cookie = client.cookies.get(COOKIE)
    page = client.get("/decisions")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    assert client.post("/logout", data={"csrf": csrf.group(1)}, headers=SAME_SITE).status_code == 303
    client.cookies.set(COOKIE, cookie or "")  # the old cookie presented again
    assert client.get("/decisions").status_code == 303  # signed out: back to the sign-in page


def test_guessing_tokens_is_answered_429_with_retry_after(auditor: _Auditor) -> None:
    guesser = _client(auditor)
    answers = [guesser.get("/decisions", headers={"Authorization": f"Bearer guess-{n:016d}"}).status_code
               for n in range(20)]  # fmt: skip
    assert answers[:5] == [401] * 5
    assert set(answers[5:]) == {429}
    blocked = guesser.get("/decisions", headers={"Authorization": f"Bearer {ACME}"})
    assert blocked.status_code == 429  # even a right token waits: the client is guessing
    assert int(blocked.headers["retry-after"]) > 0
    form = {"token": "guess", "next": "/decisions", "login_token": "x"}
    assert guesser.post("/login", data=form, headers=SAME_SITE).status_code == 429
    clock = [0.0]
    throttle = Throttle(limit=3, window_s=10, block_s=5, clock=lambda: clock[0])
    for _ in range(3):
        throttle.failed("c")
    assert throttle.retry_after("c") == 5
    clock[0] += 5
    assert throttle.retry_after("c") is None
    for _ in range(3):
        throttle.failed("c")
    assert throttle.retry_after("c") == 10  # each block twice as long as the one before


def test_behind_a_trusted_tls_proxy_the_cookie_is_secure_and_from_anyone_else_not(auditor: _Auditor) -> None:
    tokens = Tokens({"acme": SecretStr(ACME)}, None)
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7", "Origin": "https://testserver"}
    for trusted, secure in (("*", True), ("10.0.0.1", False)):  # the test client comes from neither address
        settings = Settings.from_env({"DPM_UI_TOKENS": f"acme={ACME}", "DPM_UI_TRUSTED_PROXIES": trusted})
        client = TestClient(asgi_app(auditor, tokens, settings.ui), follow_redirects=False)
        login_token = _login_form(client)
        form = {"token": ACME, "next": "/decisions", "login_token": login_token}
        signed = client.post("/login", data=form, headers=forwarded if secure else {**forwarded, **SAME_SITE})
        assert signed.status_code == 303, signed.text
        assert ("Secure" in signed.headers["set-cookie"]) is secure


@pytest.mark.parametrize("weak", ["a" * 16, "ab" * 12, "aaaaaaaaaaabcdef", "short-but-mixed"])
def test_weak_ui_tokens_are_refused_at_start_without_echoing_them(weak: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"DPM_UI_TOKENS": f"acme={weak}"})
    assert "too weak" in str(refused.value)
    assert weak not in str(refused.value)
    Settings.from_env({"DPM_UI_TOKENS": f"acme={secrets.token_hex(16)}"})  # a random token passes


def test_filters_and_pages(auditor: _Auditor) -> None:
    admin = _client(auditor, ADMIN)
    summ = admin.get("/decisions?architecture=summ").text
    assert "t-acme:summ" in summ
    assert "t-acme:dpm" not in summ
    assert admin.get("/decisions?since=2027-01-15").text.count("/decision?tenant=") == 4  # 2027-01-15 < 1.8e12 ms
    assert admin.get("/decisions?since=2030-01-01").text.count("/decision?tenant=") == 0
    assert admin.get("/decisions?since=yesterday").status_code == 400
    assert admin.get("/decisions?before=not-a-page").status_code == 400


def test_pages_go_older_and_newer_by_cursor(auditor: _Auditor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "PER_PAGE", 3)
    admin = _client(auditor, ADMIN)
    first = admin.get("/decisions?architecture=&label=")
    assert first.text.count("/decision?tenant=") == 3
    assert "t-globex:dpm" in first.text  # published last: first
    assert 'rel="prev"' not in first.text  # nothing newer
    older = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert older is not None
    second = admin.get(html.unescape(older.group(1)))
    assert second.text.count("/decision?tenant=") == 1  # the oldest
    assert 'rel="next"' not in second.text
    assert "architecture=&amp;label=&amp;" in second.text  # the filters carried along
    newer = re.search(r'href="([^"]+)" rel="prev"', second.text)
    assert newer is not None
    again = admin.get(html.unescape(newer.group(1)))
    assert again.text.count("/decision?tenant=") == 3
    assert re.findall(r'id=([^"]+)"', again.text) == re.findall(r'id=([^"]+)"', first.text)


def test_page_checks_flag_invalid_citations_and_ungrounded_figures_and_mark_whole_numbers_only() -> None:
    trajectory = load_fixture().trajectory
    event = trajectory.by_index(1)
    figure = next(t for t in event.text.split() if t.strip(".,").isdigit()).strip(".,")
    facts = (Fact(f"Figure {figure}", (1,)), Fact("Figure 123456789", (1,)), Fact("No figure", (999,)))
    view = MemoryView(facts, (), ())
    rows = fact_rows(view, trajectory)
    assert [(r.citations_valid, r.grounded) for r in rows] == [(True, True), (True, False), (False, None)]
    assert [(r.citations_valid, r.grounded) for r in fact_rows(view, None)] == [(None, None)] * 3
    [cited] = cited_events(view, trajectory)
    assert cited.index == 1
    assert cited.cited_by == (1, 2)
    assert any(s.marked and s.text == figure for s in cited.segments)
    assert [s.text for s in marked("779 and 7790 and 779.", ["779"]) if s.marked] == ["779", "779"]


def test_tokens_are_required_long_and_never_echoed_in_errors() -> None:
    with pytest.raises(NoTokensError):
        Tokens({}, None)
    for env in ({"DPM_UI_TOKENS": "acme=short"}, {"DPM_UI_ADMIN_TOKEN": "short"},
                {"DPM_UI_TOKENS": f"acme={ACME},globex={ACME}"}):  # fmt: skip
        with pytest.raises(SettingsError) as caught:
            Settings.from_env(env)
        assert "short" not in str(caught.value)
        assert ACME not in str(caught.value)
    settings = Settings.from_env({"DPM_UI_TOKENS": f"acme={ACME}, globex={GLOBEX}"})
    assert Tokens.from_settings(settings.ui).principal(GLOBEX) is not None
    assert ACME not in repr(settings)


def test_a_segmented_decision_shows_its_window_and_segment_tree() -> None:
    auditor = _Auditor()
    case = _as_tenant(load_fixture(), "acme")
    long_case = replace(case, trajectory=Trajectory(case.ref, tuple(
        replace(e, text=e.text + " Further file notes." * 40) for e in case.trajectory.events)))  # fmt: skip
    auditor.cases[long_case.ref] = long_case.trajectory
    result = run_dpm(long_case.trajectory, long_case.task, BUDGET, ExtractiveBackend(), window=Window(2048, 1500))
    published = _published(long_case, "t-long", result)
    auditor.add(published, 1_900_000_000_000)
    page = _client(auditor, ACME).get("/decision?id=t-long:dpm")
    assert page.status_code == 200
    assert "2048 tokens (estimate)" in page.text
    assert f"Segment tree: {len(result.segments)} views, 0 reused" in page.text
    assert page.text.count("<td>computed</td>") == len(result.segments)
    assert page.text.count('<details class="audit">') == published.decision.llm_calls


def test_the_admin_contests_a_decision_from_its_page_and_a_tenant_may_not_by_default(auditor: _Auditor) -> None:
    admin = _client(auditor, ADMIN)
    decisive = admin.post("/decision/contest", data={"tenant": "acme", "id": ACME_DPM, "kind": "decisive"})
    assert decisive.status_code == 200, decisive.text
    assert 'id="contest-result"' in decisive.text
    assert "Recorded as contest" in decisive.text
    found = auditor.contested[0].decisive
    assert found is not None
    for group in found.groups:  # each decisive event is marked on the page, linked to its evidence
        assert all(f'href="#event-{i}" class="cite decisive"' in decisive.text for i in group)
    whatif = admin.post("/decision/contest", data={"tenant": "acme", "id": ACME_DPM, "kind": "whatif", "drop": "1",
                                                   "why": "the applicant disputes <b>it</b>"})  # fmt: skip
    assert whatif.status_code == 200
    assert "What if (leave out [1])" in whatif.text
    assert "<b>it</b>" not in whatif.text  # nothing asked is echoed unescaped
    assert auditor.contested[1].record.asker.why == "the applicant disputes <b>it</b>"
    assert admin.post("/decision/contest", data={"tenant": "acme", "id": ACME_DPM, "kind": "whatif"}).status_code == 400
    assert admin.post("/decision/contest", data={"tenant": "acme", "id": ACME_DPM, "kind": "nuke"}).status_code == 400
    refused = _client(auditor, ACME).post("/decision/contest", data={"id": ACME_DPM, "kind": "decisive"})
    assert refused.status_code == 403
    assert len(auditor.contested) == 2
    everyone = _client(auditor, ACME, UiSettings.model_validate({"DPM_UI_CONTEST": "all"}))
    assert everyone.post("/decision/contest", data={"id": ACME_DPM, "kind": "decisive"}).status_code == 200
    foreign = everyone.post("/decision/contest", data={"id": GLOBEX_DPM, "tenant": "globex", "kind": "decisive"})
    assert foreign.status_code == 404  # another tenant's decision, as if unknown


def test_contests_are_rate_limited_per_principal_and_need_the_page_s_anti_forgery_token(auditor: _Auditor) -> None:
    client = _client(auditor, ui=UiSettings.model_validate({"DPM_UI_CONTESTS_PER_MINUTE": "2"}))
    assert _sign_in(client, ADMIN).status_code == 303
    page = client.get(f"/decision?tenant=acme&id={ACME_DPM}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    form = {"tenant": "acme", "id": ACME_DPM, "kind": "decisive"}
    assert client.post("/decision/contest", data=form, headers=SAME_SITE).status_code == 403  # no token
    assert client.post("/decision/contest", data={**form, "csrf": csrf.group(1)},
                       headers={"Origin": "https://evil.example"}).status_code == 403  # fmt: skip
    assert auditor.contested == []
    for _ in range(2):
        assert (
            client.post("/decision/contest", data={**form, "csrf": csrf.group(1)}, headers=SAME_SITE).status_code == 200
        )
    limited = client.post("/decision/contest", data={**form, "csrf": csrf.group(1)}, headers=SAME_SITE)
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) > 0
    assert len(auditor.contested) == 2


def test_an_adverse_decision_s_page_offers_and_shows_its_principal_reasons(auditor: _Auditor) -> None:
    admin = _client(auditor, ADMIN)
    page = admin.get(f"/decision?tenant=acme&id={ACME_DPM}")
    assert "DENY" in page.text
    assert 'value="reasons"' in page.text  # a denial owes reasons: the page offers them
    given = admin.post("/decision/contest", data={"tenant": "acme", "id": ACME_DPM, "kind": "reasons"})
    assert given.status_code == 200, given.text
    reasons = auditor.contested[0].reasons
    assert reasons is not None
    assert "Principal reasons for the adverse action" in given.text
    assert "they are not legal advice" in given.text
    for reason in reasons.reasons:
        assert reason.fact.text in given.text
