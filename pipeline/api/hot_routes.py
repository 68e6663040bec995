"""The routes a fleet calls thousands of times a second, without FastAPI's per-request machinery.

Measured with the writes benchmark (py-spy on the door): FastAPI's stack around a route (its
telemetry check, the middleware chain, routing, dependency solving, the body's and the answer's
models) took about a quarter of the door's CPU per append, more than the route's own work, and
held the event loop as long again for each of 500 decisions asked at once. `DoorApp` answers
`POST /v1/cases/{case_id}/events` and `.../decisions` before that stack, with the same admission
(size, key, rate, media type) and the same route methods. The body is parsed as the route would
parse it (JSON, then the route's model in Python mode); a request this path does not read as the
common case (a body that orjson or the model refuses, a case id out of the path's bounds) goes to
the FastAPI route, whose 400 names the field, so every refusal is the one the API documents.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ValidationError
from starlette.types import Message, Receive, Scope, Send

from pipeline.api.problems import Problem

Endpoint = Callable[..., Awaitable[Response]]  # (request, case_id, body, **headers) -> the answer


@dataclass(frozen=True)
class HotRoute:
    """A POST route under a case: its path (the case id its one group), its method, its body and its headers."""

    path: re.Pattern[str]
    endpoint: Endpoint
    body: type[BaseModel]
    headers: tuple[str, ...]  # header names, passed as keyword arguments ("if-match" as if_match)


@dataclass(frozen=True)
class HotRoutes:
    """What the hot routes share with FastAPI's: admission, and the refusals routes raise and how they answer."""

    admit: Callable[[Scope], None]  # raises a refusal, or keeps the caller in the scope's state
    refusals: tuple[type[Exception], ...]
    problem: Callable[[Any], Problem]  # one of `refusals` -> the problem it answers as
    routes: tuple[HotRoute, ...]

    def matched(self, path: str) -> tuple[HotRoute, str] | None:
        for route in self.routes:
            found = route.path.fullmatch(path)
            if found is not None:
                return route, found[1]
        return None

    async def serve(self, scope: Scope, receive: Receive, send: Send, matched: tuple[HotRoute, str], *,
                    routed: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:  # fmt: skip
        """Answers the matched route's request; to `routed` (FastAPI's stack) with a body it does not read."""
        route, case_id = matched
        request = Request(scope, receive)
        try:
            self.admit(scope)
            raw = await request.body()
            try:
                body = route.body.model_validate(orjson.loads(raw))
            except (orjson.JSONDecodeError, ValidationError):
                await routed(scope, _replaying(raw, receive), send)  # the route's own 400, naming the field
                return
            headers = request.headers
            named = {name.replace("-", "_"): headers.get(name) for name in route.headers}
            answer = await route.endpoint(request, case_id, body, **named)
        except self.refusals as exc:
            answer = self.problem(exc).response()
        await answer(scope, receive, send)


def case_route(cases: str, suffix: str, endpoint: Endpoint, body: type[BaseModel], *headers: str) -> HotRoute:
    """`POST <cases>/{case_id}/<suffix>`, its case id within the route's declared bounds (1 to 200 characters)."""
    return HotRoute(re.compile(rf"{re.escape(cases)}/([^/]{{1,200}})/{re.escape(suffix)}"), endpoint, body, headers)


class DoorApp(FastAPI):
    """FastAPI, with the hot routes (when set) answered before its middleware and router.

    So a hot route passes none of FastAPI's middleware but the admission it shares (`_Guard`'s, the
    one middleware the API adds), and FastAPI's own OpenTelemetry spans do not cover it.
    """

    hot: HotRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot
        if hot is not None and scope["type"] == "http" and scope["method"] == "POST":
            matched = hot.matched(scope["path"])
            if matched is not None:
                await hot.serve(scope, receive, send, matched, routed=super().__call__)
                return
        await super().__call__(scope, receive, send)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body already read once more, then hands over to the request's own."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
