"""The HTTP API's door, without a broker: keys, tenants kept apart, limits, and errors as problem details."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import quote

import orjson
import pytest
from fastapi.testclient import TestClient

from pipeline.api.app import create_api
from pipeline.client import (
    AsyncDecisionMemory,
    CaseErasedError,
    ClusterUnavailableError,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    EventPosition,
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    KeyRevokedError,
    KeyServiceUnavailableError,
    SeqMismatchError,
    TopicsMissingError,
    TopicsRefusedError,
)
from pipeline.config.settings import ApiSettings
from pipeline.core.events import ID_PATTERN, LogPosition
from pipeline.core.task import TaskSpec
from pipeline.services.api_keys import ADMIN, ApiKeys
from pipeline.services.tenant_gate import TenantNotOnClusterError
from pipeline.wire.door_checks import DECISION_ID_PATTERN

PRIVATE_TEXT = "Applicant income verified: 84,000 (a value no error may echo)"


class FakeMemory:
    """A tenant's client as the API uses it: appends numbered in order, decisions refused or unknown."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.appended: list[tuple[str, list[tuple[str, str]], str | None]] = []

    async def append_many(self, case_id: str, events: Iterable[tuple[str, str]], *, idempotency_key: str | None = None,
                          expected_seq: int | None = None, timeout: float = 60.0) -> list[EventPosition]:  # fmt: skip
        _refuse(case_id, idempotency_key)
        if expected_seq is not None and expected_seq != 0:  # the fake's cases have no events before
            raise SeqMismatchError(f"case acme/{case_id}: its last seq is 0", current_seq=0)
        items = list(events)
        self.appended.append((case_id, items, idempotency_key))
        return [EventPosition(case_id, n + 1, LogPosition(0, n)) for n in range(len(items))]

    async def request(self, case_id: str, *, task: TaskSpec, budget: int, architecture: str,
                      idempotency_key: str | None, timeout: float = 60.0) -> str:  # fmt: skip
        _refuse(case_id, idempotency_key)
        return f"t-{case_id}:{architecture}"

    async def wait(self, decision_id: str, timeout: float) -> object:
        if decision_id.startswith("t-kms-"):  # the worker's dead letter once the tenant's key service failed it
            reason = "key-revoked" if "revoked" in decision_id else "key-service-unavailable"
            raise DecisionRefusedError.of(decision_id, reason, "AWS KMS (eu-west-1) cannot be reached")
        raise DecisionRefusedError.of(decision_id, "schema", "refused by the fake worker")

    async def decision(self, decision_id: str) -> object:
        if decision_id.startswith("erased-"):
            raise CaseErasedError("case acme/erased-case was erased")
        raise DecisionNotFoundError(decision_id)

    async def decisions_of(self, case_id: str, *, after: str | None = None, limit: int | None = None) -> list[str]:
        return []

    async def contests(self, decision_id: str) -> list[object]:
        await self.decision(decision_id)
        return []

    async def collect(self, decision_id: str, wait_s: float) -> object:
        try:
            return await self.decision(decision_id)
        except DecisionNotFoundError:
            if wait_s <= 0:
                raise
        return await self.wait(decision_id, wait_s)


def _refuse(case_id: str, idempotency_key: str | None) -> None:
    """What the real client raises, by name: a key used before for another request, one in flight, an erased case."""
    if case_id == "erased-case":
        raise CaseErasedError("case acme/erased-case was erased")
    if case_id == "sealing-away":  # a new case's data key to wrap, and the key service does not answer
        raise KeyServiceUnavailableError("AWS KMS (eu-west-1) cannot be reached: connect timeout")
    if case_id == "sealing-revoked":
        raise KeyRevokedError("AWS KMS (eu-west-1): v1 of tenant 'acme' is disabled")
    if idempotency_key == "reused":
        raise IdempotencyKeyReusedError("case acme/c: this idempotency key was used before")
    if idempotency_key == "in-flight":
        raise IdempotencyKeyInFlightError("case acme/c: still being written")


Api = tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys]  # client, keys by tenant, memories, store


@pytest.fixture
def api(tmp_path: Path) -> Api:
    keys = ApiKeys(tmp_path / "api-keys.json")
    made = {tenant: keys.add(tenant)[1] for tenant in ("acme", "globex", ADMIN)}
    memories: dict[str, FakeMemory] = {}

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        return cast(AsyncDecisionMemory, memories.setdefault(tenant, FakeMemory(tenant)))

    async def erase(tenant: str, case_id: str) -> int:
        return 1

    app = create_api(
        memory_for,
        keys,
        ApiSettings.model_validate(
            {"DPM_API_MAX_BODY_BYTES": 2_048, "DPM_API_RATE_PER_S": 5.0, "DPM_API_MAX_WAIT_S": 20.0}
        ),
        erase,
    )
    return TestClient(app), made, memories, keys


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Answer(Protocol):
    """What the test client answers (its response class is its own HTTP library's)."""

    @property
    def status_code(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def content(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


def _problem(response: Answer, status: int) -> dict[str, object]:
    """The problem document of an answer, checked: its status, its media type, no value sent echoed."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = orjson.loads(response.content)
    assert body["status"] == status
    assert PRIVATE_TEXT not in str(body)
    return body


def test_an_append_is_numbered_by_the_client_and_answers_201(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, memories, _ = api
    body = {"events": [{"kind": "document", "text": PRIVATE_TEXT}, {"kind": "tool", "text": "score 712"}]}
    answer = client.post(
        "/v1/cases/case-7/events", json=body, headers={**_auth(keys["acme"]), "Idempotency-Key": "s-1"}
    )
    assert answer.status_code == 201
    assert [e["seq"] for e in answer.json()["events"]] == [1, 2]
    assert memories["acme"].appended == [("case-7", [("document", PRIVATE_TEXT), ("tool", "score 712")], "s-1")]


def test_no_key_a_wrong_one_and_a_removed_one_are_401(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, _, store = api
    body = {"events": [{"kind": "document", "text": "x"}]}
    for headers in ({}, _auth("dpm_nope_nope"), _auth(keys["acme"][:-2] + "xx"), {"Authorization": keys["acme"]}):
        refused = _problem(client.post("/v1/cases/c/events", json=body, headers=headers), 401)
        assert str(refused["type"]).endswith("unauthorized")
    store.remove(tenant="acme")
    _problem(client.post("/v1/cases/c/events", json=body, headers=_auth(keys["acme"])), 401)
    assert client.get("/openapi.json").status_code == 200  # the document needs no key


def test_another_tenant_s_decision_is_404_and_an_admin_key_only_erases(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, _, _ = api
    _problem(client.get("/v1/decisions/t-case-7:dpm", headers=_auth(keys["globex"])), 404)
    _problem(client.get("/v1/decisions/not-an-id", headers=_auth(keys["globex"])), 400)  # no one's: said so
    _problem(client.post("/v1/cases/c/events", json={"events": [{"kind": "k", "text": "t"}]},
                         headers=_auth(keys[ADMIN])), 403)  # fmt: skip
    _problem(client.delete("/v1/tenants/acme/cases/case-7", headers=_auth(keys["acme"])), 403)
    assert client.delete("/v1/tenants/acme/cases/case-7", headers=_auth(keys[ADMIN])).status_code == 204


def test_bad_bodies_say_which_field_and_never_echo_it(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, _, _ = api
    acme = _auth(keys["acme"])
    missing = _problem(client.post("/v1/cases/c/events", json={"events": [{"text": PRIVATE_TEXT}]}, headers=acme), 400)
    assert "events.0.kind" in str(missing["detail"])
    _problem(
        client.post("/v1/cases/c/events", content=b"{not json", headers={**acme, "content-type": "application/json"}),
        400,
    )
    big = {"events": [{"kind": "document", "text": "x" * 3_000}]}
    assert "exceed the limit of 2048 bytes" in str(
        _problem(client.post("/v1/cases/c/events", json=big, headers=acme), 413)["detail"]
    )
    _problem(client.post("/v1/cases/bad%20id/events", json={"events": [{"kind": "k", "text": "t"}]}, headers=acme), 400)


def test_an_unknown_domain_a_budget_out_of_range_and_a_refusal_are_422(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, _, _ = api
    acme = _auth(keys["acme"])
    unknown = _problem(client.post("/v1/cases/c/decisions", json={"domain": "astrology"}, headers=acme), 422)
    assert str(unknown["type"]).endswith("unknown-domain")
    budget = _problem(
        client.post("/v1/cases/c/decisions", json={"domain": "loan", "budget_chars": 10}, headers=acme), 422
    )
    assert str(budget["type"]).endswith("budget-out-of-range")
    refused = _problem(client.post("/v1/cases/c/decisions", json={"domain": "loan"}, headers=acme), 422)
    assert (refused["reason"], refused["decision_id"]) == ("schema", "t-c:dpm")


def test_a_key_past_its_rate_is_told_when_to_come_back(
    api: tuple[TestClient, dict[str, str], dict[str, FakeMemory], ApiKeys],
) -> None:
    client, keys, _, _ = api
    answers = [client.get("/v1/decisions/t-x:dpm", headers=_auth(keys["acme"])) for _ in range(12)]
    limited = [a for a in answers if a.status_code == 429]
    assert limited, [a.status_code for a in answers]  # a burst of twice the rate (10), then refused
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert client.get("/v1/decisions/t-x:dpm", headers=_auth(keys["globex"])).status_code == 404  # per key


def test_keys_are_stored_as_hashes_owner_readable_and_removed_with_their_tenant(tmp_path: Path) -> None:
    store = ApiKeys(tmp_path / "api-keys.json")
    made, key = store.add("acme")
    store.add("globex")
    stored = store.path.read_text()
    secret = key.removeprefix("dpm_").partition("_")[2]  # the id is hex; the secret may hold underscores
    assert secret not in stored
    assert made.secret_sha256 in stored
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert store.holder(key) == made
    assert [k.tenant for k in store.remove(tenant="acme")] == ["acme"]
    assert store.holder(key) is None  # every replica reads the file again when it changes
    assert [k.tenant for k in store.listed()] == ["globex"]


_HOSTILE = [
    ({"events": [{"kind": "doc\x01" + PRIVATE_TEXT[:10], "text": PRIVATE_TEXT}]}, "events[0].kind"),
    ({"events": [{"kind": "doc\x7f", "text": PRIVATE_TEXT}]}, "events[0].kind"),
    ({"events": [{"kind": "ok", "text": "x"}, {"kind": "line\nbreak", "text": PRIVATE_TEXT}]}, "events[1].kind"),
    ({"events": [{"kind": "document", "text": PRIVATE_TEXT + "\x00"}]}, "events[0].text"),
]


@pytest.mark.parametrize(("body", "field"), _HOSTILE)
def test_control_characters_in_a_kind_and_nul_in_a_text_are_400_naming_the_field(
    api: Api, body: dict[str, object], field: str
) -> None:
    client, keys, memories, _ = api
    refused = _problem(client.post("/v1/cases/c/events", json=body, headers=_auth(keys["acme"])), 400)
    assert str(refused["detail"]).startswith(field + ":")
    assert "doc\x01" not in str(refused)
    assert "\\x01" not in str(refused)
    assert "acme" not in memories or not memories["acme"].appended  # nothing reached the client


def test_a_task_s_labels_each_once_and_the_document_says_so(api: Api) -> None:
    client, keys, _, _ = api
    task = {"domain": "loan", "task": "decide", "label_space": ["APPROVE", "APPROVE"]}
    refused = _problem(client.post("/v1/cases/c/decisions", json={"task": task}, headers=_auth(keys["acme"])), 400)
    assert str(refused["detail"]).startswith("task.label_space:")
    for bad in ({**task, "label_space": ["A"], "domain": "Loan"}, {**task, "label_space": ["A"], "task": "   "},
                {**task, "label_space": [f"L{n}" for n in range(33)]}):  # fmt: skip
        _problem(client.post("/v1/cases/c/decisions", json={"task": bad}, headers=_auth(keys["acme"])), 400)
    labels = client.get("/openapi.json").json()["components"]["schemas"]["TaskIn"]["properties"]["label_space"]
    assert labels["uniqueItems"] is True


def test_wait_s_is_a_number_up_to_the_declared_maximum_and_longer_is_refused_not_clamped(api: Api) -> None:
    client, keys, _, _ = api
    acme = _auth(keys["acme"])
    document = client.get("/openapi.json").json()
    declared = document["components"]["schemas"]["DecideIn"]["properties"]["wait_s"]
    assert (declared["type"], declared["maximum"], declared["default"]) == ("number", 20.0, 20.0)
    [query] = [
        p for p in document["paths"]["/v1/decisions/{decision_id}"]["get"]["parameters"] if p["name"] == "wait_s"
    ]
    assert (query["schema"]["type"], query["schema"]["maximum"]) == ("number", 20.0)
    over = _problem(client.get("/v1/decisions/t-x:dpm?wait_s=20.5", headers=acme), 400)
    assert str(over["detail"]).startswith("wait_s:")
    assert "DPM_API_MAX_WAIT_S" in str(over["detail"])
    for wait in (20.5, True, "5"):
        asked = {"domain": "loan", "wait_s": wait}
        _problem(client.post("/v1/cases/c/decisions", json=asked, headers=acme), 400)
    _problem(client.get("/v1/decisions/t-x:dpm?wait_s=inf", headers=acme), 400)
    assert client.get("/v1/decisions/t-x:dpm?wait_s=20", headers=acme).status_code == 422  # at the maximum: waited


def test_ids_are_declared_with_the_patterns_the_routes_check(api: Api) -> None:
    client, keys, _, _ = api
    paths = client.get("/openapi.json").json()["paths"]

    def pattern(path: str, method: str, name: str) -> str:
        [found] = [p for p in paths[path][method]["parameters"] if p["name"] == name]
        return str(found["schema"]["pattern"])

    assert pattern("/v1/cases/{case_id}/events", "post", "case_id") == ID_PATTERN
    assert pattern("/v1/tenants/{tenant}/cases/{case_id}", "delete", "tenant") == ID_PATTERN
    assert pattern("/v1/decisions/{decision_id}", "get", "decision_id") == DECISION_ID_PATTERN
    assert {"204", "400", "401", "403", "429", "503"} <= set(paths["/v1/tenants/{tenant}/cases/{case_id}"]["delete"]
                                                             ["responses"])  # fmt: skip
    _problem(client.delete("/v1/tenants/ac%20me/cases/c", headers=_auth(keys[ADMIN])), 400)


def test_an_erasure_of_nothing_left_is_204_and_a_cluster_away_503(tmp_path: Path) -> None:
    keys = ApiKeys(tmp_path / "api-keys.json")
    admin = keys.add(ADMIN)[1]
    erased: list[tuple[str, str]] = []

    async def erase(tenant: str, case_id: str) -> int:
        if tenant == "away":
            raise ClusterUnavailableError("the broker did not answer")
        erased.append((tenant, case_id))
        return 0  # nothing left: never written, or erased already

    async def no_memory(tenant: str) -> AsyncDecisionMemory:
        raise AssertionError(tenant)

    client = TestClient(create_api(no_memory, keys, ApiSettings.model_validate({}), erase))
    for tenant in ("acme", "ACME", "acme"):
        assert client.delete(f"/v1/tenants/{tenant}/cases/c-1", headers=_auth(admin)).status_code == 204
    assert erased == [("acme", "c-1"), ("ACME", "c-1"), ("acme", "c-1")]
    _problem(client.delete("/v1/tenants/away/cases/c-1", headers=_auth(admin)), 503)


def test_a_body_without_content_type_json_is_415_naming_the_header(api: Api) -> None:
    client, keys, _, _ = api
    body = orjson.dumps({"events": [{"kind": "k", "text": PRIVATE_TEXT}]})
    for headers in ({}, {"content-type": "text/plain"}):
        refused = _problem(client.post("/v1/cases/c/events", content=body, headers={**_auth(keys["acme"]), **headers}),
                           415)  # fmt: skip
        assert "Content-Type" in str(refused["detail"])
    ok = client.post("/v1/cases/c/events", content=body,
                     headers={**_auth(keys["acme"]), "content-type": "application/json; charset=utf-8"})  # fmt: skip
    assert ok.status_code == 201


def test_bearer_with_two_spaces_or_any_case_is_read_as_the_key(api: Api) -> None:
    client, keys, _, store = api
    for header in (f"Bearer  {keys['acme']}", f"bearer {keys['acme']}", f"BEARER   {keys['acme']}"):
        assert client.get("/v1/cases/c/decisions", headers={"Authorization": header}).status_code != 401
        assert store.bearer(header) is not None  # the rule the MCP server's verifier uses too
    for header in (f"Bearer\t{keys['acme']}", f"Basic {keys['acme']}", "Bearer "):
        _problem(client.get("/v1/cases/c/decisions", headers={"Authorization": header}), 401)


def test_a_tenant_without_topics_is_404_not_a_broken_cluster(tmp_path: Path) -> None:
    keys = ApiKeys(tmp_path / "api-keys.json")
    globex = keys.add("globex")[1]

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        raise TenantNotOnClusterError("this key's tenant has no topics on this cluster")

    client = TestClient(create_api(memory_for, keys, ApiSettings.model_validate({})))
    for answer in (client.get("/v1/decisions/k-1:dpm", headers=_auth(globex)),
                   client.get("/v1/cases/c/decisions", headers=_auth(globex)),
                   client.post("/v1/cases/c/events", json={"events": [{"kind": "k", "text": "t"}]},
                               headers=_auth(globex))):  # fmt: skip
        assert str(_problem(answer, 404)["type"]).endswith("tenant-not-found")


def test_a_body_that_is_not_utf8_json_and_an_unknown_route_answer_problems(api: Api) -> None:
    client, keys, _, _ = api
    acme = {**_auth(keys["acme"]), "content-type": "application/json"}
    refused = _problem(client.post("/v1/cases/c/decisions", content=b"X\xff\xfe", headers=acme), 400)
    assert str(refused["detail"]).startswith("body:")
    _problem(client.get("/v1/no-such-route", headers=acme), 404)


def test_a_pending_decision_s_location_is_percent_encoded(api: Api) -> None:
    client, keys, memories, _ = api
    acme = _auth(keys["acme"])
    client.get("/v1/cases/c/decisions", headers=acme)  # the tenant's client made
    waited: list[str] = []

    async def never(decision_id: str, timeout: float) -> object:
        waited.append(decision_id)
        raise DecisionTimeoutError.of(decision_id, timeout)

    memories["acme"].wait = never  # type: ignore[method-assign]
    pending = client.get("/v1/decisions/k-\u00e9\U00092e5e:dpm?wait_s=1", headers=acme)
    assert pending.status_code == 202, pending.text
    assert pending.headers["Location"] == "/v1/decisions/k-%C3%A9%F2%92%B9%9E:dpm"


_STEP = {"events": [{"kind": "tool", "text": PRIVATE_TEXT}]}


@pytest.mark.parametrize("header", ["", " ", "a b", "x" * 201, '"unterminated', '""'])
def test_an_idempotency_key_that_is_not_1_to_200_visible_ascii_characters_answers_400_and_writes_nothing(
    api: Api, header: str
) -> None:
    client, made, memories, _ = api
    response = client.post("/v1/cases/c/events", json=_STEP, headers={**_auth(made["acme"]), "Idempotency-Key": header})
    assert "Idempotency-Key" in str(_problem(response, 400)["detail"])
    assert not memories.get("acme") or not memories["acme"].appended


def test_the_drafts_quoted_key_and_the_bare_key_name_the_same_key(api: Api) -> None:
    client, made, memories, _ = api
    for header in ('"step-1"', "step-1"):
        response = client.post("/v1/cases/c/events", json=_STEP,
                               headers={**_auth(made["acme"]), "Idempotency-Key": header})  # fmt: skip
        assert response.status_code == 201, response.text
    assert [key for _, _, key in memories["acme"].appended] == ["step-1", "step-1"]


@pytest.mark.parametrize(("key", "status", "kind"), [("reused", 422, "idempotency-key-reused"),
                                                     ("in-flight", 409, "idempotency-key-in-flight")])  # fmt: skip
def test_a_key_reused_or_in_flight_answers_its_own_problem_on_appends_and_decisions(
    api: Api, key: str, status: int, kind: str
) -> None:
    client, made, _, _ = api
    headers = {**_auth(made["acme"]), "Idempotency-Key": key}
    appended = client.post("/v1/cases/c/events", json=_STEP, headers=headers)
    decided = client.post("/v1/cases/c/decisions", json={"domain": "loan"}, headers=headers)
    for response in (appended, decided):
        assert str(_problem(response, status)["type"]).endswith(kind)


def test_an_append_answers_its_last_seq_as_etag_and_if_match_of_another_seq_answers_412_writing_nothing(
    api: Api,
) -> None:
    client, made, memories, _ = api
    two = {"events": [_STEP["events"][0], _STEP["events"][0]]}
    done = client.post("/v1/cases/c/events", json=two, headers={**_auth(made["acme"]), "If-Match": '"0"'})
    assert done.status_code == 201, done.text
    assert done.headers["ETag"] == '"2"'
    moved = client.post("/v1/cases/c/events", json=_STEP, headers={**_auth(made["acme"]), "If-Match": '"5"'})
    problem = _problem(moved, 412)
    assert str(problem["type"]).endswith("seq-mismatch")
    assert problem["current_seq"] == 0
    assert moved.headers["ETag"] == '"0"'
    assert len(memories["acme"].appended) == 1


@pytest.mark.parametrize("header", ["5", 'W/"5"', "*", '"5", "6"', '"-1"', '"1e3"', '"100000000"'])
def test_an_if_match_that_is_not_one_strong_seq_tag_answers_400_and_writes_nothing(api: Api, header: str) -> None:
    client, made, memories, _ = api
    response = client.post("/v1/cases/c/events", json=_STEP, headers={**_auth(made["acme"]), "If-Match": header})
    assert "If-Match" in str(_problem(response, 400)["detail"])
    assert not memories.get("acme") or not memories["acme"].appended


def test_an_erased_case_answers_410_to_its_tenants_appends_decisions_and_reads(api: Api) -> None:
    client, made, _, _ = api
    auth = _auth(made["acme"])
    answers = [client.post("/v1/cases/erased-case/events", json=_STEP, headers=auth),
               client.post("/v1/cases/erased-case/decisions", json={"domain": "loan"}, headers=auth),
               client.get("/v1/decisions/erased-1:dpm", headers=auth)]  # fmt: skip
    for response in answers:
        assert str(_problem(response, 410)["type"]).endswith("case-erased")


def test_a_key_service_away_answers_503_with_retry_after_and_a_revoked_key_403_naming_no_provider(api: Api) -> None:
    client, made, _, _ = api
    auth = _auth(made["acme"])
    away = [client.post("/v1/cases/sealing-away/events", json=_STEP, headers=auth),
            client.post("/v1/cases/kms-away/decisions", json={"domain": "loan"}, headers=auth)]  # fmt: skip
    for response in away:
        problem = _problem(response, 503)
        assert str(problem["type"]).endswith("key-service-unavailable")
        assert response.headers["retry-after"] == "30"
        assert "Idempotency-Key" in str(problem["detail"])  # retried with the same key, the request is decided
    revoked = [client.post("/v1/cases/sealing-revoked/events", json=_STEP, headers=auth),
               client.post("/v1/cases/kms-revoked/decisions", json={"domain": "loan"}, headers=auth)]  # fmt: skip
    for response in revoked:
        assert str(_problem(response, 403)["type"]).endswith("key-revoked")
    assert not any("AWS KMS" in r.text for r in away + revoked)  # the provider is the operator's to read, in the log


def test_a_tenants_first_request_without_the_pipelines_topics_answers_503_naming_the_command(tmp_path: Path) -> None:
    keys = ApiKeys(tmp_path / "api-keys.json")
    _, key = keys.add("acme")

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        raise TopicsMissingError(
            "the pipeline's topics do not exist (dpm.events): create them with `dpm topics create`"
        )

    client = TestClient(create_api(memory_for, keys, ApiSettings.model_validate({})))
    response = client.post("/v1/cases/c/events", json=_STEP, headers=_auth(key))
    body = _problem(response, 503)
    assert "dpm topics create" in str(body["detail"])
    assert response.headers["retry-after"]


def test_a_tenants_topics_the_cluster_refuses_the_door_answer_503_topics_refused_naming_no_topic(
    tmp_path: Path,
) -> None:
    keys = ApiKeys(tmp_path / "api-keys.json")
    _, key = keys.add("acme")

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        raise TopicsRefusedError("the cluster refuses the principal of DPM_KAFKA_CONFIG the tenant 'acme''s topics "
                                 "(dpm.acme.events)")  # fmt: skip

    client = TestClient(create_api(memory_for, keys, ApiSettings.model_validate({})))
    response = client.post("/v1/cases/c/events", json=_STEP, headers=_auth(key))
    body = _problem(response, 503)
    assert str(body["type"]).endswith("topics-refused")
    assert "dpm.acme.events" not in str(body["detail"])  # the agent is told to wait, not the cluster's layout
    assert response.headers["retry-after"]


_ONE_STEP = b'{"events": [{"kind": "tool", "text": "a"}]}'
HOT_REQUESTS = [  # (route, case id, body, extra headers): the common case, and each kind of refusal each meets
    ("events", "case-1", b'{"events": [{"kind": "tool", "text": "score 712"}]}', {}),
    ("events", "case-2", _ONE_STEP, {"Idempotency-Key": '"s-9"', "If-Match": '"0"'}),
    ("events", "case-3", _ONE_STEP, {"If-Match": '"4"'}),
    ("events", "case-4", _ONE_STEP, {"If-Match": 'W/"0"'}),
    ("events", "case-5", _ONE_STEP, {"Idempotency-Key": "reused"}),
    ("events", "case-6", _ONE_STEP, {"Idempotency-Key": ""}),
    ("events", "erased-case", _ONE_STEP, {}),
    ("events", "bad id!", _ONE_STEP, {}),
    ("events", "x" * 201, _ONE_STEP, {}),
    ("events", "case-7", b'{"events": [{"kind": "to\\u0001ol", "text": "a"}]}', {}),
    ("events", "case-8", b'{"events": []}', {}),
    ("events", "case-9", b'{"events": [{"kind": "tool"}]}', {}),
    ("events", "case-10", b"not json", {}),
    ("events", "case-11", b'{"events": [{"kind": "tool", "text": NaN}]}', {}),
    ("events", "case-12", _ONE_STEP, {"Content-Type": "text/plain"}),
    ("events", "case-13", _ONE_STEP, {"Authorization": "Bearer nope"}),
    ("events", "case-14", b"x" * 3_000, {}),
    ("events", "case-15", b"", {}),
    ("decisions", "case-1", b'{"domain": "loan", "wait_s": 0}', {}),
    ("decisions", "case-2", b'{"domain": "loan", "wait_s": 0.5, "budget_chars": 900}', {"Idempotency-Key": "d-1"}),
    ("decisions", "case-3", b'{"domain": "loan", "budget_chars": 900.0}', {}),
    ("decisions", "case-4", b'{"domain": "loan", "budget_chars": 10}', {}),
    ("decisions", "case-5", b'{"domain": "loan", "wait_s": 999}', {}),
    ("decisions", "case-6", b'{"domain": "loan", "wait_s": "5"}', {}),
    ("decisions", "case-7", b'{"domain": "no-such-domain"}', {}),
    ("decisions", "case-8", b'{"task": {"domain": "loan", "task": "t", "label_space": ["A", "A"]}}', {}),
    ("decisions", "case-9", b"{}", {}),
    ("decisions", "case-10", b'{"domain": "loan", "architecture": "other"}', {}),
    ("decisions", "case-11", b'{"domain": "loan"}', {"Idempotency-Key": "in-flight"}),
    ("decisions", "x" * 201, b'{"domain": "loan"}', {}),
    ("decisions", "case-12", b"[]", {}),
]


@pytest.mark.parametrize(("route", "case_id", "body", "headers"), HOT_REQUESTS)
def test_appends_and_decisions_answer_the_same_through_the_hot_routes_and_through_fastapi(
    api: Api, route: str, case_id: str, body: bytes, headers: dict[str, str]
) -> None:
    client, keys, _, _ = api
    sent = {**_auth(keys["acme"]), "Content-Type": "application/json", **headers}
    url = f"/v1/cases/{quote(case_id, safe='')}/{route}"
    hot = client.post(url, content=body, headers=sent)
    client.app.hot, kept = None, client.app.hot  # type: ignore[attr-defined]
    try:
        routed = client.post(url, content=body, headers=sent)
    finally:
        client.app.hot = kept  # type: ignore[attr-defined]
    assert kept is not None
    assert (hot.status_code, hot.content) == (routed.status_code, routed.content)
    assert dict(hot.headers) == dict(routed.headers)
    if hot.status_code == 201:
        assert hot.headers["content-type"] == "application/json"
        assert hot.headers["etag"] == f'"{hot.json()["events"][-1]["seq"]}"'
