"""Routing an append to the door that owns its partition, without a broker: the group's view, the door's answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import cast

import orjson
import pytest
from aiohttp import web
from fastapi.testclient import TestClient
from multidict import CIMultiDict

from pipeline.api.app import create_api
from pipeline.client import AsyncDecisionMemory
from pipeline.config.settings import ApiSettings
from pipeline.kafka.writing.door_group import CLIENT_ID_PREFIX, DoorGroups, GroupView, owners_of
from pipeline.services.api_keys import ApiKeys
from pipeline.services.door_routes import VIA, DoorRoutes, Forwarded, ForwardFailedError, door_url, was_forwarded
from tests.unit.test_api import FakeMemory

SELF, PEER = "http://10.0.0.1:8088", "http://10.0.0.2:8088"


def test_owners_come_from_the_doors_client_ids_and_other_clients_are_left_out() -> None:
    members = [(f"{CLIENT_ID_PREFIX}{SELF}", [("dpm.events", 0), ("dpm.events", 1)]),
               (f"{CLIENT_ID_PREFIX}{PEER}", [("dpm.events", 2)]), ("rdkafka", [("dpm.events", 3)])]  # fmt: skip
    assert owners_of(members) == {("dpm.events", 0): SELF, ("dpm.events", 1): SELF, ("dpm.events", 2): PEER}


def test_a_door_s_url_is_its_bind_address_or_the_host_s_for_every_interface() -> None:
    assert door_url("127.0.0.1", 8088) == "http://127.0.0.1:8088"
    assert door_url("::1", 8088) == "http://[::1]:8088"
    wildcard = door_url("0.0.0.0", 8089)  # noqa: S104 - a name, nothing bound
    assert wildcard.startswith("http://")
    assert wildcard.endswith(":8089")
    assert "0.0.0.0" not in wildcard  # noqa: S104


def test_a_request_from_another_door_is_known_by_its_via() -> None:
    assert was_forwarded({"via": VIA})
    assert was_forwarded({"via": f"1.1 balancer, {VIA}"})
    assert not was_forwarded({"via": "1.1 balancer"})
    assert not was_forwarded({})


class _Group:
    """A door's memberships as DoorRoutes reads them: one group, its URL and the latest view."""

    def __init__(self, *views: GroupView) -> None:
        self.url, self._views = SELF, list(views)

    def view(self) -> GroupView:
        return self._views.pop(0) if len(self._views) > 1 else self._views[0]

    def for_topic(self, topic: str) -> _Group:
        return self

    def close(self) -> None:
        """Nothing joined: nothing to leave."""


def _owner(*views: GroupView) -> str | None:
    routes = DoorRoutes(cast(DoorGroups, _Group(*views)), wait_s=1.0)
    return asyncio.run(routes.owner("dpm.events", 0))


def test_an_append_goes_to_its_partition_s_owner_or_is_made_here() -> None:
    here, there = ("dpm.events", 0), ("dpm.events", 0)
    assert _owner(GroupView({here: SELF}, settled=True)) is None
    assert _owner(GroupView({there: PEER}, settled=True)) == PEER
    assert _owner(GroupView({}, settled=True)) is None  # a topic the group does not divide yet
    # while the group rebalances, an owner given a moment later is waited for
    assert _owner(GroupView({}, settled=False), GroupView({}, settled=False), GroupView({there: PEER})) == PEER


def test_an_append_waits_a_bounded_moment_for_an_owner_then_is_made_here() -> None:
    assert _owner(GroupView({}, settled=False)) is None


class _Doors:
    """Another door owns every partition: its answer is fixed, or it is gone, or its answer was lost."""

    def __init__(self, answer: Forwarded | Exception | None) -> None:
        self.answer = answer
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    async def owner(self, topic: str, partition: int) -> str | None:
        return PEER

    async def forward(self, owner: str, path: str, body: bytes, headers: Mapping[str, str]) -> Forwarded | None:
        self.sent.append((path, body, dict(headers)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _door(tmp_path: Path, doors: _Doors) -> tuple[TestClient, FakeMemory, dict[str, str]]:
    keys = ApiKeys(tmp_path / "api-keys.json")
    key = keys.add("acme")[1]
    memory = FakeMemory("acme")

    async def partition_of(case_id: str) -> tuple[str, int]:
        return ("dpm.events", 0)

    memory.partition_of = partition_of  # type: ignore[attr-defined]

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        return cast(AsyncDecisionMemory, memory)

    app = create_api(memory_for, keys, ApiSettings.model_validate({}), doors=doors)
    return TestClient(app), memory, {"Authorization": f"Bearer {key}", "Idempotency-Key": "k-1"}


BODY = {"events": [{"kind": "note", "text": "income verified"}]}


def test_an_append_for_another_door_s_partition_is_answered_by_that_door(tmp_path: Path) -> None:
    owned = b'{"case_id":"c.1","events":[{"seq":3,"partition":0,"offset":9}]}'
    doors = _Doors(Forwarded(201, {"content-type": "application/json", "etag": '"3"'}, owned))
    client, memory, headers = _door(tmp_path, doors)
    answer = client.post("/v1/cases/c.1/events", json=BODY, headers=headers)
    assert (answer.status_code, answer.content, answer.headers["etag"], answer.headers["via"]) == (201, owned, '"3"',
                                                                                                  VIA)  # fmt: skip
    assert memory.appended == []  # written by the owner only
    [(path, body, sent)] = doors.sent
    assert path == "/v1/cases/c.1/events"
    assert orjson.loads(body) == BODY
    assert sent["idempotency-key"] == "k-1"
    assert sent["authorization"] == headers["Authorization"]


def test_a_forwarded_append_is_made_where_it_lands_never_forwarded_again(tmp_path: Path) -> None:
    doors = _Doors(AssertionError("forwarded twice"))
    client, memory, headers = _door(tmp_path, doors)
    answer = client.post("/v1/cases/c-1/events", json=BODY, headers={**headers, "Via": VIA})
    assert answer.status_code == 201, answer.text
    assert [case for case, *_ in memory.appended] == ["c-1"]


def test_an_owner_that_refuses_the_connection_leaves_the_append_to_this_door(tmp_path: Path) -> None:
    client, memory, headers = _door(tmp_path, _Doors(None))
    answer = client.post("/v1/cases/c-1/events", json=BODY, headers=headers)
    assert answer.status_code == 201, answer.text
    assert "via" not in answer.headers
    assert [case for case, *_ in memory.appended] == ["c-1"]


def test_an_owner_whose_answer_is_lost_answers_503_with_retry_after(tmp_path: Path) -> None:
    client, memory, headers = _door(tmp_path, _Doors(ForwardFailedError("it may have been written")))
    answer = client.post("/v1/cases/c-1/events", json=BODY, headers=headers)
    assert answer.status_code == 503
    assert answer.json()["type"].endswith("/owner-unanswered")
    assert answer.headers["retry-after"] == "1"
    assert memory.appended == []


@pytest.mark.parametrize("status", [412, 422, 503])
def test_the_owner_s_refusal_is_passed_back_as_it_came(tmp_path: Path, status: int) -> None:
    problem = orjson.dumps({"type": "about:blank", "title": "t", "status": status, "detail": "d"})
    doors = _Doors(Forwarded(status, {"content-type": "application/problem+json", "retry-after": "5"}, problem))
    client, _, headers = _door(tmp_path, doors)
    answer = client.post("/v1/cases/c-1/events", json=BODY, headers=headers)
    assert (answer.status_code, answer.content) == (status, problem)
    assert answer.headers["content-type"] == "application/problem+json"


async def _forwarded_to(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                        headers: list[tuple[str, str]]) -> tuple[Forwarded | None, dict[str, str]]:  # fmt: skip
    """What forward() answers when the owner runs `handler` on loopback, and the headers the owner got."""
    got: dict[str, str] = {}

    async def seen(request: web.Request) -> web.StreamResponse:
        got.update({k.lower(): v for k, v in request.headers.items() if k.lower() not in got})
        return await handler(request)

    app = web.Application()
    app.router.add_post("/v1/cases/{case}/events", seen)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    routes = DoorRoutes(cast(DoorGroups, _Group(GroupView({}, settled=True))), wait_s=1.0)
    try:
        answer = await routes.forward(f"http://127.0.0.1:{port}", "/v1/cases/c1/events", b"{}",
                                      CIMultiDict(headers))  # fmt: skip
    finally:
        await routes.close()
        await runner.cleanup()
    return answer, got


def test_a_forward_sends_the_callers_first_headers_with_via_and_keeps_the_owners_answer() -> None:
    async def owner(_: web.Request) -> web.StreamResponse:
        return web.Response(status=201, body=b'{"case_id": "c1"}', headers={"ETag": '"3"', "X-Other": "no"},
                            content_type="application/json")  # fmt: skip

    answer, got = asyncio.run(_forwarded_to(owner, [
        ("Authorization", "Bearer first"), ("Authorization", "Bearer second"), ("Idempotency-Key", "k1"),
        ("Cookie", "not forwarded"), ("Content-Type", "application/json"),
    ]))  # fmt: skip
    assert answer == Forwarded(201, {"content-type": "application/json", "etag": '"3"'}, b'{"case_id": "c1"}')
    assert (got["authorization"], got["idempotency-key"], got["via"]) == ("Bearer first", "k1", VIA)
    assert "cookie" not in got


def test_an_owner_that_refuses_the_connection_is_appended_here_and_one_that_drops_it_is_a_failure() -> None:
    routes = DoorRoutes(cast(DoorGroups, _Group(GroupView({}, settled=True))), wait_s=1.0)

    async def refused() -> Forwarded | None:
        try:
            with socket.socket() as probe:  # a port nobody listens on
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            return await routes.forward(f"http://127.0.0.1:{port}", "/v1/cases/c1/events", b"{}", {})
        finally:
            await routes.close()

    assert asyncio.run(refused()) is None

    async def drops(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()  # took the append, then went away without an answer
        return web.Response()

    with pytest.raises(ForwardFailedError, match="may have been written"):
        asyncio.run(_forwarded_to(drops, []))
