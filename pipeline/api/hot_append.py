"""The append route without FastAPI's per-request machinery: the one route a fleet calls thousands of times a second.

Measured with the writes benchmark's closed loop (64 agents appending back to back, py-spy on the
door): FastAPI's stack around the route (its telemetry check, the middleware chain, routing,
dependency solving, the body's and the answer's models) took about a quarter of the door's CPU per
append, more than the route's own work. `DoorApp` answers `POST /v1/cases/{case_id}/events` before
that stack, with the same admission (size, key, rate, media type) and the same route method; a
request it cannot read as the common case (a body that is not JSON or not valid, a case id out of
the path's bounds) goes to the FastAPI route, whose 400 names the field, so every refusal is the
one the API documents.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ValidationError
from starlette.types import Message, Receive, Scope, Send

from pipeline.api.problems import Problem

_APPENDS = re.compile(r"/v1/cases/([^/]{1,200})/events")  # the route's path; its case id within CaseId's bounds
AppendRoute = Callable[..., Awaitable[Response]]


@dataclass(frozen=True)
class HotAppend:
    """What the hot path shares with the FastAPI route: its admission, its method, its body and its refusals."""

    admit: Callable[[Scope], None]  # raises a refusal, or keeps the caller in the scope's state
    append: AppendRoute  # (request, case_id, body, *, idempotency_key, if_match) -> the answer
    body: type[BaseModel]
    refusals: tuple[type[Exception], ...]
    problem: Callable[[Any], Problem]  # one of `refusals` -> the problem it answers as

    async def serve(self, scope: Scope, receive: Receive, send: Send, case_id: str,
                    routed: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:  # fmt: skip
        request = Request(scope, receive)
        try:
            self.admit(scope)
            raw = await request.body()
            try:
                body = self.body.model_validate_json(raw)
            except ValidationError:
                await routed(scope, _replaying(raw, receive), send)  # the route's own 400, naming the field
                return
            headers = request.headers
            answer = await self.append(request, case_id, body, idempotency_key=headers.get("idempotency-key"),
                                       if_match=headers.get("if-match"))  # fmt: skip
        except self.refusals as exc:
            answer = self.problem(exc).response()
        await answer(scope, receive, send)


class DoorApp(FastAPI):
    """FastAPI, with appends answered by `hot_append` (when set) before its middleware and router."""

    hot_append: HotAppend | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot_append
        if hot is not None and scope["type"] == "http" and scope["method"] == "POST":
            matched = _APPENDS.fullmatch(scope["path"])
            if matched is not None:
                await hot.serve(scope, receive, send, matched[1], super().__call__)
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
