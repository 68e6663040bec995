"""The HTTP API's door, without a broker: keys, tenants kept apart, limits, and errors as problem details."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, cast

import orjson
import pytest
from fastapi.testclient import TestClient

from pipeline.api.app import create_api
from pipeline.client import AsyncDecisionMemory, DecisionNotFoundError, DecisionRefusedError, EventPosition
from pipeline.config.settings import ApiSettings
from pipeline.core.events import LogPosition
from pipeline.core.task import TaskSpec
from pipeline.services.api_keys import ADMIN, ApiKeys

PRIVATE_TEXT = "Applicant income verified: 84,000 (a value no error may echo)"


class FakeMemory:
    """A tenant's client as the API uses it: appends numbered in order, decisions refused or unknown."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.appended: list[tuple[str, list[tuple[str, str]], str | None]] = []

    async def append_many(self, case_id: str, events: Iterable[tuple[str, str]], *,
                          idempotency_key: str | None = None) -> list[EventPosition]:  # fmt: skip
        items = list(events)
        self.appended.append((case_id, items, idempotency_key))
        return [EventPosition(case_id, n + 1, LogPosition(0, n)) for n in range(len(items))]

    async def request(self, case_id: str, *, task: TaskSpec, budget: int, architecture: str,
                      idempotency_key: str | None) -> str:  # fmt: skip
        return f"t-{case_id}:{architecture}"

    async def wait(self, decision_id: str, timeout: float) -> object:
        raise DecisionRefusedError.of(decision_id, "schema", "refused by the fake worker")

    async def decision(self, decision_id: str) -> object:
        raise DecisionNotFoundError(decision_id)

    async def collect(self, decision_id: str, wait_s: float) -> object:
        try:
            return await self.decision(decision_id)
        except DecisionNotFoundError:
            if wait_s <= 0:
                raise
        return await self.wait(decision_id, wait_s)


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
        ApiSettings.model_validate({"DPM_API_MAX_BODY_BYTES": 2_048, "DPM_API_RATE_PER_S": 5.0}),
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
    _problem(client.get("/v1/decisions/not-an-id", headers=_auth(keys["globex"])), 404)
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
