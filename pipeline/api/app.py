"""The HTTP API for agents (`dpm api`): append a case's steps, ask for a decision, read it back, under /v1.

Each request names its tenant by its API key (services/api_keys.py), never by a parameter: one
tenant's key cannot reach another's cases, whose ids answer 404 exactly as unknown ones. Bodies use
the wire forms' field names (`kind`, `text`, `budget_chars`, `label_space`). Errors are RFC 9457
problem documents that say what was wrong in one line and never echo what was sent. Nothing a
replica keeps is needed by another: appends are numbered by the case's writer, read back from the
log, and decisions are read from the output topics; the rate limit is per replica.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import quote

import orjson
from fastapi import FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.api.hot_routes import DoorApp, HotRoutes, case_route
from pipeline.api.problems import (
    Problem,
    bad_request,
    not_found,
    rate_limited,
    too_large,
    unauthorized,
    unprocessable,
)
from pipeline.client import (
    AsyncDecisionMemory,
    CaseErasedError,
    ClientError,
    ClusterUnavailableError,
    Decision,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    EventTooLargeError,
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    KeyRevokedError,
    KeyServiceError,
    NoEventsError,
    NotAdverseError,
    ReasonsUnavailableError,
    SeqMismatchError,
    TopicsMissingError,
    TopicsRefusedError,
    UnknownCursorError,
)
from pipeline.client.memory import DEFAULT_BUDGET_CHARS
from pipeline.config.settings import ApiSettings
from pipeline.core.contest import NOT_ADVICE
from pipeline.core.errors import DpmError
from pipeline.core.events import ID_PATTERN, KIND_PATTERN, MAX_KIND_CHARS, MAX_TEXT_CHARS
from pipeline.core.idempotency import InvalidIdempotencyKeyError, header_key
from pipeline.core.task import TaskSpec
from pipeline.services.api_keys import ApiKey, ApiKeys
from pipeline.services.door_routes import VIA, Doors, ForwardFailedError, was_forwarded
from pipeline.services.tenant_gate import TenantNotOnClusterError
from pipeline.wire import door_checks
from pipeline.wire.contest import reasons_outcome
from pipeline.wire.door_checks import (
    DECISION_ID_PATTERN,
    DEFAULT_WAIT_S,
    DOMAIN_PATTERN,
    MAX_BUDGET_CHARS,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    MAX_TASK_CHARS,
    MIN_BUDGET_CHARS,
    RefusedArgumentError,
)
from pipeline.wire.rejection import Rejection

_LOG = logging.getLogger("pipeline.api")
_Answer = TypeVar("_Answer")
VERSION = "v1"
# Path parameters declare the id rules the routes check (door_checks): the document and the server agree.
CaseId = Annotated[str, Path(min_length=1, max_length=200, description="the case, as the agent names it",
                             json_schema_extra={"pattern": ID_PATTERN})]  # fmt: skip
TenantId = Annotated[str, Path(min_length=1, max_length=200, description="the case's tenant",
                               json_schema_extra={"pattern": ID_PATTERN})]  # fmt: skip
DecisionIdParam = Annotated[str, Path(min_length=1, description="a decision's id, as its request answered it",
                                      json_schema_extra={"pattern": DECISION_ID_PATTERN})]  # fmt: skip
PAGE_LIMIT = 1_000  # decision ids in one page of a case's list, by default and at most
PageLimit = Annotated[int, Query(ge=1, le=PAGE_LIMIT, description="most decision ids in the page")]
PageAfter = Annotated[str | None, Query(min_length=1, description="the page after this decision id (the "
                                        "`next_after` of the page before)")]  # fmt: skip
WaitS = Annotated[float, Query(ge=0, allow_inf_nan=False, description="seconds to wait for the decision, at most "
                               "DPM_API_MAX_WAIT_S (the document's maximum); longer is refused")]  # fmt: skip


class EventIn(BaseModel):
    """One step of the agent: what kind of step, and its text."""

    kind: str = Field(
        min_length=1,
        max_length=MAX_KIND_CHARS,
        examples=["document"],
        json_schema_extra={"pattern": KIND_PATTERN},
        description="a label: no control characters",
    )
    text: str = Field(max_length=MAX_TEXT_CHARS, examples=["Applicant income verified: 84,000"],
                      json_schema_extra={"pattern": "^[^\\u0000]*$"}, description="any text but NUL")  # fmt: skip


class AppendIn(BaseModel):
    """Steps appended in order, all or none (one transaction)."""

    events: list[EventIn] = Field(min_length=1, max_length=1_000)


class Position(BaseModel):
    seq: int
    partition: int
    offset: int


class Appended(BaseModel):
    case_id: str
    events: list[Position]


Label = Annotated[str, Field(min_length=1, max_length=MAX_LABEL_CHARS)]


class TaskIn(BaseModel):
    domain: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": DOMAIN_PATTERN})
    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS, description="not only spaces")
    label_space: list[Label] = Field(min_length=1, max_length=MAX_LABELS, json_schema_extra={"uniqueItems": True},
                                     description="the labels a decision may take, each once")  # fmt: skip


class DecideIn(BaseModel):
    """A decision of the case as it stands: the domain's standing task, or a task given whole."""

    domain: str | None = Field(None, examples=["loan"])
    task: TaskIn | None = None
    budget_chars: int = Field(
        DEFAULT_BUDGET_CHARS, strict=True, json_schema_extra={"minimum": MIN_BUDGET_CHARS, "maximum": MAX_BUDGET_CHARS}
    )  # out of range: 422 budget-out-of-range
    architecture: Literal["dpm", "summ"] = "dpm"
    wait_s: float = Field(DEFAULT_WAIT_S, ge=0, strict=True, allow_inf_nan=False,
                          description="seconds to wait for the decision before answering 202, at most "
                          "DPM_API_MAX_WAIT_S (the document's maximum); longer is refused")  # fmt: skip


class CitedEventOut(BaseModel):
    seq: int
    kind: str
    text: str
    partition: int
    offset: int


class FactOut(BaseModel):
    text: str
    cites: list[CitedEventOut]


class UsageOut(BaseModel):
    backend: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class DecisionOut(BaseModel):
    decision_id: str
    case_id: str
    label: str | None
    rationale: str
    facts: list[FactOut]
    reasoning: list[str]
    compliance: list[str]
    usage: UsageOut
    replay_command: str

    @classmethod
    def of(cls, decision: Decision) -> DecisionOut:
        return cls.model_validate(decision.to_json())


class FactCheckOut(BaseModel):
    """A fact checked against the case's events as read now."""

    number: int
    text: str
    citations: list[int]
    citations_valid: bool | None = Field(description="every cited event exists (null: the events are unreadable)")
    grounded: bool | None = Field(description="its figures are in the cited events (null: none to check)")


class ExplanationOut(BaseModel):
    decision: DecisionOut
    facts: list[FactCheckOut]
    events_unreadable: str | None = Field(description='why the checks could not be made ("erased", "log changed")')


class ReplayOut(BaseModel):
    """The decision re-run from its recorded offsets and verified by hash (the recorded backend)."""

    decision_id: str
    status: str = Field(examples=["MATCH"], description="MATCH, DRIFT, MISMATCH, ERASED, ... (see the docs)")
    detail: str


class ReasonOut(BaseModel):
    rank: int
    fact: str = Field(description="a fact of the decision's memory view")
    citations: list[int] = Field(description="the events it cites (1-based indices in the case's log)")
    changes_decision: bool | None = Field(
        description="leaving its cited events out changes the decision (null: it cites none, or was not tried)"
    )
    in_notice: bool = Field(description="the decision's own notice names its figures")


class ReasonsOut(BaseModel):
    """The principal reasons of an adverse decision, weightiest first (computed, not recorded)."""

    decision_id: str
    label: str
    heading: str = Field(description="how the decision's domain names them (an adverse action notice, a claims letter)")
    reasons: list[ReasonOut]
    complete: bool = Field(description="false: the call budget ran out before every fact was tried")
    note: str = Field(description="what the reasons are and are not")


class ContestOut(BaseModel):
    contest_id: str
    kind: str | None = Field(description="whatif, decisive or reasons; null: its case is erased")
    replay: str = Field(description="MATCH when every re-decision it records reproduces from its recorded answers")
    detail: str


class ContestsOut(BaseModel):
    decision_id: str
    contests: list[ContestOut] = Field(description="oldest first, each replayed from its record (no model call)")


class CaseDecisionsOut(BaseModel):
    case_id: str
    decision_ids: list[str] = Field(description="oldest first; one page of at most `limit`")
    next_after: str | None = Field(None, description="the `after` of the next page; null: this page is the last")


class Pending(BaseModel):
    decision_id: str
    status: Literal["pending"] = "pending"
    url: str
    hint: str | None = Field(None, description="why it may not come: no worker of its architecture is running")


class ProblemOut(BaseModel):
    """An RFC 9457 problem document, as every error answers (media type application/problem+json)."""

    type: str
    title: str
    status: int
    detail: str


_MEANINGS = {400: "a body or parameter that does not parse or validate (the field named, never its value)",
             401: "no API key, or an unknown or removed one", 403: "a tenant's key where an admin key is needed, or "
             "the other way round, or the tenant's key-encryption key is revoked at its key service (key-revoked)",
             404: "no such decision for this key's tenant (another tenant's too), or, with "
             "tenancy by topic, no topics of the key's tenant on this cluster",
             409: "a request with the same Idempotency-Key is still being written (idempotency-key-in-flight): "
             "nothing was written",
             410: "the case was erased (case-erased): its decisions are gone and it takes no more events",
             411: "a body without Content-Length", 412: "an If-Match naming another seq than the case's last "
             "(seq-mismatch, with current_seq and the case's ETag): nothing was written",
             413: "a body over DPM_API_MAX_BODY_BYTES", 415: "a body not sent as Content-Type: application/json",
             422: "an unknown domain, a budget out of range, a case with no events, a request the worker refused "
             "(its reason), or an Idempotency-Key used before with another request (idempotency-key-reused): "
             "nothing was written", 429: "this key's rate is exceeded "
             "(Retry-After)", 503: "the cluster did not answer within DPM_API_BROKER_WAIT_S, or the pipeline's topics "
             "do not exist (topics-missing): nothing was written, unless an append's commit was sent and its "
             "answer lost (retry with the same Idempotency-Key), as when the door that owns the case took it and "
             "did not answer (owner-unanswered), or the tenant's key service did not answer (key-service-unavailable)"
             " (Retry-After)"}  # fmt: skip


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entries of the problems a route answers with."""
    return {status: {"model": ProblemOut, "description": _MEANINGS[status],
                     "content": {"application/problem+json": {}}} for status in statuses}  # fmt: skip


class RateLimit:
    """A token bucket per key: `rate` requests a second, bursts of twice as many (per replica)."""

    def __init__(self, rate: float) -> None:
        self._rate, self._burst = rate, 2 * rate
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, when)
        self._lock = threading.Lock()

    def retry_after(self, key_id: str) -> int | None:
        """None when the request may go now (it is counted); else the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            tokens, when = self._buckets.get(key_id, (self._burst, now))
            tokens = min(self._burst, tokens + (now - when) * self._rate)
            if tokens >= 1:
                self._buckets[key_id] = (tokens - 1, now)
                return None
            self._buckets[key_id] = (tokens, now)
            return max(1, math.ceil((1 - tokens) / self._rate))


MemoryFor = Callable[[str], Awaitable[AsyncDecisionMemory]]


@dataclass(frozen=True)
class _Caller:
    key: ApiKey

    @property
    def tenant(self) -> str:
        return self.key.tenant


def create_api(memory_for: MemoryFor, keys: ApiKeys, settings: ApiSettings,
               erase: Callable[[str, str], Awaitable[int]] | None = None,
               doors: Doors | None = None) -> FastAPI:  # fmt: skip
    """The API's application: `memory_for(tenant)` is the tenant's client, `erase(tenant, case)` erases a case.

    `doors`: this door's place among the door replicas; an append for a case whose partition another
    door owns is forwarded to it (services/door_routes.py). None: every append is made here.
    """
    app = DoorApp(title="dpm", version=VERSION, description=__doc__, openapi_url="/openapi.json", docs_url=None,
                  redoc_url=None)  # fmt: skip
    _answer_problems(app)
    admission = _Admission(keys, RateLimit(settings.rate_per_s), settings.max_body_bytes)
    app.add_middleware(_Guard, admission=admission)
    routes = _Routes(memory_for, settings, erase, doors)
    cases = f"/{VERSION}/cases"
    app.hot = HotRoutes(admission.admit, REFUSALS, _refusal, (
        case_route(cases, "events", routes.append, AppendIn, "idempotency-key", "if-match"),
        case_route(cases, "decisions", routes.decide, DecideIn, "idempotency-key"),
    ))  # fmt: skip
    written = (400, 401, 403, 404, 409, 410, 411, 413, 415, 422, 429, 503)
    app.add_api_route(f"/{VERSION}/cases/{{case_id}}/events", routes.append, methods=["POST"], status_code=201,
                      response_model=Appended, responses=_problems(*written, 412),
                      summary="Append steps to a case")  # fmt: skip
    app.add_api_route(f"/{VERSION}/cases/{{case_id}}/decisions", routes.decide, methods=["POST"],
                      response_model=DecisionOut, responses={202: {"model": Pending}, **_problems(*written)},
                      summary="Ask for a decision of a case, waiting up to wait_s")  # fmt: skip
    app.add_api_route(f"/{VERSION}/decisions/{{decision_id}}", routes.read, methods=["GET"],
                      response_model=DecisionOut,
                      responses={202: {"model": Pending}, **_problems(400, 401, 403, 404, 410, 422, 429, 503)},
                      summary="Read a decision, waiting up to wait_s")  # fmt: skip
    app.add_api_route(f"/{VERSION}/decisions/{{decision_id}}/explanation", routes.explain, methods=["GET"],
                      response_model=ExplanationOut, responses=_problems(400, 401, 403, 404, 410, 429, 503),
                      summary="A decision with its facts checked against its events")  # fmt: skip
    app.add_api_route(f"/{VERSION}/decisions/{{decision_id}}/replay", routes.replay, methods=["GET"],
                      response_model=ReplayOut, responses=_problems(400, 401, 403, 404, 410, 429, 503),
                      summary="Replay a decision from its recorded offsets and verify it by hash")  # fmt: skip
    app.add_api_route(f"/{VERSION}/decisions/{{decision_id}}/reasons", routes.reasons, methods=["GET"],
                      response_model=ReasonsOut, responses=_problems(400, 401, 403, 404, 409, 410, 429, 503),
                      summary="The principal reasons of an adverse decision")  # fmt: skip
    app.add_api_route(f"/{VERSION}/decisions/{{decision_id}}/contests", routes.contests, methods=["GET"],
                      response_model=ContestsOut, responses=_problems(400, 401, 403, 404, 410, 429, 503),
                      summary="A decision's contests, each replayed from its record")  # fmt: skip
    app.add_api_route(f"/{VERSION}/cases/{{case_id}}/decisions", routes.decisions_of, methods=["GET"],
                      response_model=CaseDecisionsOut, responses=_problems(400, 401, 403, 404, 410, 422, 429, 503),
                      summary="The ids of a case's published decisions, in pages")  # fmt: skip
    app.add_api_route("/healthz", _healthz, methods=["GET"], summary="Liveness: the process answers (no key)")
    app.add_api_route(f"/{VERSION}/tenants/{{tenant}}/cases/{{case_id}}", routes.erase_case, methods=["DELETE"],
                      status_code=204, responses=_problems(400, 401, 403, 429, 503),
                      summary="Erase a case (admin key); 204 for one never written or erased already too")  # fmt: skip
    _document(app, settings.max_wait_s)
    return app


def _document(app: FastAPI, max_wait_s: float) -> None:
    """The OpenAPI document as the server answers.

    Invalid bodies are 400 problems (not FastAPI's default 422), and wait_s declares this server's
    maximum (DPM_API_MAX_WAIT_S), as the routes refuse longer waits.
    """
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for operations in schema["paths"].values():
                for operation in operations.values():
                    default = operation["responses"].get("422", {})
                    if "HTTPValidationError" in str(default.get("content", "")):
                        del operation["responses"]["422"]
                    for parameter in operation.get("parameters", ()):
                        if parameter["name"] == "wait_s":
                            parameter["schema"]["maximum"] = max_wait_s
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            wait = schema["components"]["schemas"]["DecideIn"]["properties"]["wait_s"]
            wait.update(maximum=max_wait_s, default=min(DEFAULT_WAIT_S, max_wait_s))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]


def _answer_problems(app: FastAPI) -> None:
    """Problems answer as themselves; a body that does not parse or validate is a 400 naming the field only."""

    @app.exception_handler(Problem)
    async def _problem(_: Request, problem: Problem) -> JSONResponse:
        return problem.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body that is not UTF-8 JSON, a route that does not exist) as problems too
        if exc.status_code == 400:
            return bad_request("body: not a JSON document in UTF-8").response()
        phrase = HTTPStatus(exc.status_code).phrase
        return Problem(
            exc.status_code, phrase.lower().replace(" ", "-"), phrase, phrase, dict(exc.headers or {})
        ).response()

    @app.exception_handler(RefusedArgumentError)
    @app.exception_handler(TenantNotOnClusterError)
    async def _refused(_: Request, exc: RefusedArgumentError | TenantNotOnClusterError) -> JSONResponse:
        return _refusal(exc).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return bad_request(f"{where}: {first.get('msg', 'invalid')}").response()  # the message names no value


class _Admission:
    """What every request passes first: the body's declared size, then (under /v1) the API key and its rate."""

    def __init__(self, keys: ApiKeys, limits: RateLimit, max_body_bytes: int) -> None:
        self._keys, self._limits, self._max_body_bytes = keys, limits, max_body_bytes

    def admit(self, scope: Scope) -> None:
        """Raises the request's Problem, or keeps its key as the scope's caller (under /v1)."""
        request = Request(scope)
        _check_size(request, self._max_body_bytes)
        if scope["path"].startswith(f"/{VERSION}/"):
            caller = _caller(request, self._keys)
            wait = self._limits.retry_after(caller.key.key_id)
            if wait is not None:
                raise rate_limited(wait)
            _check_media_type(request)
            scope.setdefault("state", {})["caller"] = caller


class _Guard:
    """Admission before any route (a request a hot route admitted, hot_routes.py, is not admitted twice).

    A plain ASGI middleware, not Starlette's BaseHTTPMiddleware (`@app.middleware`), which runs
    every request through a task and a memory stream of its own: at 50 concurrent decisions that
    cost more than the rest of the door.
    """

    def __init__(self, app: ASGIApp, admission: _Admission) -> None:
        self._app, self._admission = app, admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "caller" not in scope.get("state", {}):  # (the hot routes admitted it)
            try:
                self._admission.admit(scope)
            except Problem as problem:
                await problem.response()(scope, receive, send)
                return
        await self._app(scope, receive, send)


IdempotencyKey = Annotated[str | None, Header(description="1 to 200 visible ASCII characters, bare or as the draft's "
                                             "quoted string: the same key with the same request answers as the "
                                             "first and writes nothing; with another request, 422")]  # fmt: skip


def _idempotency_key(header: str | None) -> str | None:
    """The key an Idempotency-Key header names; 400 for one that is empty or not 1-200 visible ASCII characters."""
    if header is None:
        return None
    try:
        return header_key(header)
    except InvalidIdempotencyKeyError as exc:
        raise bad_request(f"Idempotency-Key: {exc}") from None


IfMatch = Annotated[str | None, Header(description='the case\'s last seq as the agent saw it, as an entity tag '
                                     '("<seq>", the ETag of the last append; "0" for a case with no events): when '
                                     "the case has moved on, 412 seq-mismatch and nothing is written")]  # fmt: skip


class _Routes:
    def __init__(self, memory_for: MemoryFor, settings: ApiSettings,
                 erase: Callable[[str, str], Awaitable[int]] | None, doors: Doors | None) -> None:  # fmt: skip
        self._memory_for, self._settings, self._erase, self._doors = memory_for, settings, erase, doors

    async def _memory(self, request: Request) -> AsyncDecisionMemory:
        caller: _Caller = request.state.caller
        if caller.key.admin:
            raise Problem(403, "tenant-key-needed", "Forbidden", "appends and decisions are made with a tenant's key")
        try:
            return await self._memory_for(caller.tenant)
        except CLIENT_ERRORS as exc:  # the tenant's first request: no broker, or no topics, within the bound
            raise _client_problem(exc) from exc

    async def append(self, request: Request, case_id: CaseId, body: AppendIn, *,
                     idempotency_key: IdempotencyKey = None, if_match: IfMatch = None) -> Response:  # fmt: skip
        """Appends the steps after the case's last, all or none; 201 with their seqs and positions.

        The answer's ETag is the seq of the last event written (`"<seq>"`), the If-Match of the next append.
        An append for a case another door replica owns is that door's answer (with a `Via` header).
        """
        door_checks.case_id(case_id)
        steps = door_checks.events((e.kind, e.text) for e in body.events)
        key = _idempotency_key(idempotency_key)
        expected = door_checks.if_match_seq(if_match)
        memory = await self._memory(request)
        forwarded = await self._forwarded(request, memory, case_id)
        if forwarded is not None:
            return forwarded
        try:
            done = await memory.append_many(case_id, steps, idempotency_key=key, expected_seq=expected,
                                            timeout=self._settings.broker_wait_s)  # fmt: skip
        except SeqMismatchError as exc:
            raise Problem(412, "seq-mismatch", "Precondition failed",
                          f"the case's last seq is {exc.current_seq}, not the one If-Match names; nothing was written:"
                          " read its new events, then append after them", {"ETag": f'"{exc.current_seq}"'},
                          current_seq=exc.current_seq) from exc  # fmt: skip
        except EventTooLargeError as exc:
            raise Problem(413, "event-too-large", "Content too large",
                          f"events[{exc.index}] takes {exc.size} bytes as a record (its text sealed, with its "
                          f"headers), over the limit of {exc.limit}; nothing was written") from exc  # fmt: skip
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc
        # Appended's JSON made here, not through the route's response model: appends are the door's hot path
        answer = {"case_id": case_id, "events": [{"seq": a.seq, "partition": a.position.partition,
                                                  "offset": a.position.offset} for a in done]}  # fmt: skip
        return Response(orjson.dumps(answer), status_code=201, media_type="application/json",
                        headers={"ETag": f'"{done[-1].seq}"'} if done else None)  # fmt: skip

    async def _forwarded(self, request: Request, memory: AsyncDecisionMemory, case_id: str) -> Response | None:
        """The owning door's answer to this append, when another door owns the case's partition; else None."""
        if self._doors is None or was_forwarded(request.headers):
            return None
        try:
            owner = await self._doors.owner(*await memory.partition_of(case_id))
            if owner is None:
                return None
            path = f"/{VERSION}/cases/{quote(case_id, safe='')}/events"
            answer = await self._doors.forward(owner, path, await request.body(), request.headers)
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc
        except ForwardFailedError as exc:
            raise Problem(503, "owner-unanswered", "Service unavailable", str(exc), {"Retry-After": "1"}) from exc
        if answer is None:
            return None  # the owner is gone: appended here, taking its partition over
        return Response(answer.body, status_code=answer.status, headers={**answer.headers, "via": VIA})

    async def decide(self, request: Request, case_id: CaseId, body: DecideIn,
                     idempotency_key: IdempotencyKey = None) -> Response:  # fmt: skip
        """The decision (200), or 202 with its URL when it takes longer than wait_s."""
        door_checks.case_id(case_id)
        task = _task(body)
        door_checks.budget(body.budget_chars)
        wait_s = door_checks.wait_s(body.wait_s if "wait_s" in body.model_fields_set else None,
                                    self._settings.max_wait_s)  # fmt: skip
        key = _idempotency_key(idempotency_key)
        memory = await self._memory(request)
        try:
            decision_id = await memory.request(case_id, task=task, budget=body.budget_chars,
                                               architecture=body.architecture, idempotency_key=key,
                                               timeout=self._settings.broker_wait_s)  # fmt: skip
            return _decision(await memory.wait(decision_id, wait_s))
        except DecisionTimeoutError as exc:
            return _pending(exc.decision_id, exc.hint)
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc

    async def read(self, request: Request, decision_id: DecisionIdParam, wait_s: WaitS = 0.0) -> Response:
        """A published decision of the key's tenant; 404 for any other id, 202 while waited for in vain."""
        door_checks.decision_id(decision_id)
        waited = door_checks.wait_s(wait_s, self._settings.max_wait_s)
        memory = await self._memory(request)
        try:
            return _decision(await memory.collect(decision_id, waited))
        except DecisionNotFoundError:
            raise not_found("decision") from None
        except DecisionTimeoutError as exc:
            return _pending(decision_id, exc.hint)
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc

    async def _published(self, request: Request, decision_id: str,
                         ask: Callable[[AsyncDecisionMemory, str], Awaitable[_Answer]]) -> _Answer:  # fmt: skip
        """`ask` about one published decision of the key's tenant: 404 for any other id, a client error's problem."""
        door_checks.decision_id(decision_id)
        memory = await self._memory(request)
        try:
            return await ask(memory, decision_id)
        except DecisionNotFoundError:
            raise not_found("decision") from None
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc

    async def explain(self, request: Request, decision_id: DecisionIdParam) -> ExplanationOut:
        """The decision and each fact checked against the case's events as read now (what the auditor's page shows)."""
        explained = await self._published(request, decision_id, lambda memory, d: memory.explain(d))
        facts = [FactCheckOut(number=r.number, text=r.text, citations=list(r.citations),
                              citations_valid=r.citations_valid, grounded=r.grounded)
                 for r in explained.facts]  # fmt: skip
        return ExplanationOut(decision=DecisionOut.of(explained.decision), facts=facts,
                              events_unreadable=explained.events_unreadable)  # fmt: skip

    async def replay(self, request: Request, decision_id: DecisionIdParam) -> ReplayOut:
        """Re-runs the decision with its recorded backend from its recorded offsets; the verdict by hash."""
        report = await self._published(request, decision_id, lambda memory, d: memory.replay(d))
        return ReplayOut(decision_id=decision_id, status=report.status.value, detail=report.detail)

    async def reasons(self, request: Request, decision_id: DecisionIdParam) -> ReasonsOut:
        """Each fact of the view, weightiest first, with whether leaving its cited events out changes the decision."""
        given = await self._published(request, decision_id, lambda memory, d: memory.reasons(d))
        outcome = reasons_outcome(given)
        return ReasonsOut(decision_id=decision_id, label=given.label, heading=given.heading,
                          reasons=[ReasonOut(**row) for row in outcome["reasons"]], complete=given.complete,
                          note=NOT_ADVICE)  # fmt: skip

    async def contests(self, request: Request, decision_id: DecisionIdParam) -> ContestsOut:
        """The decision's published contests (what-ifs, decisive analyses, reasons), each replayed from its record."""
        found = await self._published(request, decision_id, lambda memory, d: memory.contests(d))
        return ContestsOut(decision_id=decision_id, contests=[ContestOut(**c.to_json()) for c in found])

    async def decisions_of(self, request: Request, case_id: CaseId, limit: PageLimit = PAGE_LIMIT,
                           after: PageAfter = None) -> CaseDecisionsOut:  # fmt: skip
        """The case's published decisions of the key's tenant, in pages (another tenant's case: none, as unknown).

        Each page is read from the lookup index: its cost does not grow with the output topics.
        """
        door_checks.case_id(case_id)
        if after is not None:
            door_checks.decision_id(after)
        memory = await self._memory(request)
        try:
            ids = await memory.decisions_of(case_id, after=after, limit=limit)
        except CLIENT_ERRORS as exc:
            raise _client_problem(exc) from exc
        return CaseDecisionsOut(case_id=case_id, decision_ids=ids, next_after=ids[-1] if len(ids) == limit else None)

    async def erase_case(self, request: Request, tenant: TenantId, case_id: CaseId) -> Response:
        """Erases a case: its data key destroyed, its events tombstoned (an admin key only).

        Idempotent: a case never written, or erased already, answers 204 as well (nothing of it is left).
        """
        caller: _Caller = request.state.caller
        if not caller.key.admin or self._erase is None:
            raise Problem(403, "admin-key-needed", "Forbidden", "erasing a case needs an admin key")
        door_checks.tenant(tenant)
        door_checks.case_id(case_id)
        try:
            await self._erase(tenant, case_id)
        except ClusterUnavailableError as exc:
            raise _client_problem(exc) from exc
        except DpmError as exc:  # a step failed: what is done and what is left, and that running it again is safe
            _LOG.warning("an erasure stopped: %s", type(exc).__name__)
            raise Problem(503, "erasure-incomplete", "Service unavailable", str(exc), {"Retry-After": "5"}) from exc
        return Response(status_code=204)


def _decision(decision: Decision) -> Response:
    """200 with the decision: Decision.to_json's bytes as they are.

    DecisionOut documents that shape (a test holds the answers to it). Validating each answer
    through the model again cost a few ms of the event loop's time per decision, which fifty
    decisions answered at once queue behind.
    """
    return Response(orjson.dumps(decision.to_json()), media_type="application/json")


async def _healthz() -> dict[str, str]:
    return {"status": "ok"}


# Client errors that answer one fixed problem each: (status, type, title, detail).
_FIXED_PROBLEMS: tuple[tuple[type[ClientError], tuple[int, str, str, str]], ...] = (
    (NoEventsError, (422, "no-events", "Unprocessable request", "the case has no events: append its steps before "
                     "asking for a decision")),
    (IdempotencyKeyReusedError, (422, "idempotency-key-reused", "Unprocessable request", "this Idempotency-Key was "
                                 "used before with another request; nothing was written: send the same request "
                                 "again, or use a new key")),
    (IdempotencyKeyInFlightError, (409, "idempotency-key-in-flight", "Conflict", "a request with this "
                                   "Idempotency-Key is still being written; nothing of this one was: retry once it "
                                   "has answered")),
    (CaseErasedError, (410, "case-erased", "Gone", "the case was erased: its decisions are gone and it takes no more "
                       "events; a subject who comes back is a new case id")),
    (NotAdverseError, (409, "not-adverse", "Conflict", "the decision's domain does not mark its label adverse: it "
                       "owes no reasons")),
    (ReasonsUnavailableError, (409, "reasons-unavailable", "Conflict", "the decision's recorded events are no longer "
                               "what it read, or its model could not answer")),
    (UnknownCursorError, (422, "unknown-cursor", "Unprocessable request", "`after` is none of the case's decisions: "
                          "give the `next_after` of the page before, or leave it out for the first page")),
)  # fmt: skip


REFUSALS = (Problem, RefusedArgumentError, TenantNotOnClusterError)  # what a route raises to answer a problem


def _refusal(exc: Problem | RefusedArgumentError | TenantNotOnClusterError) -> Problem:
    """The problem a route's refusal answers as: an argument refused, or a tenant not on this cluster."""
    if isinstance(exc, RefusedArgumentError):
        return unprocessable(exc.slug, str(exc)) if exc.unprocessable else bad_request(str(exc))
    if isinstance(exc, TenantNotOnClusterError):
        return Problem(404, "tenant-not-found", "Not found", str(exc))
    return exc


def _key_service_problem(exc: Exception) -> Problem | None:
    """A tenant's key service away (503, retry) or its key revoked there (403), met here or by the worker.

    The provider and what to check are the operator's to read, in this door's log or the worker's.
    """
    if isinstance(exc, KeyServiceError):
        _LOG.warning("the key service failed a request: %s", exc)
        revoked = isinstance(exc, KeyRevokedError)
    elif isinstance(exc, DecisionRefusedError) and exc.reason in _KEY_SERVICE_REASONS:
        revoked = exc.reason == Rejection.KEY_REVOKED.value
    else:
        return None
    if revoked:
        return Problem(403, "key-revoked", "Forbidden", "the tenant's key-encryption key is disabled or revoked at its "
                       "key service: its cases are refused until the key's owner enables it again")  # fmt: skip
    return Problem(503, "key-service-unavailable", "Service unavailable", "the tenant's key service did not answer; "
                   "nothing was decided or written: send the request again (with the same Idempotency-Key, a decision "
                   "request is sent again and nothing is written twice)", {"Retry-After": "30"})  # fmt: skip


_KEY_SERVICE_REASONS = (Rejection.KEY_SERVICE_UNAVAILABLE.value, Rejection.KEY_REVOKED.value)
# What a client call raises that answers as a problem: its own errors, and a tenant's key service failing it.
CLIENT_ERRORS = (ClientError, KeyServiceError)


def _client_problem(exc: Exception) -> Problem:
    """The problem a client error answers as."""
    if isinstance(exc, DecisionRefusedError) and exc.reason == Rejection.ERASED.value:
        exc = CaseErasedError(str(exc))  # refused because the case was erased meanwhile: gone, as its reads
    key_service = _key_service_problem(exc)
    if key_service is not None:
        return key_service
    for kind, (status, name, title, detail) in _FIXED_PROBLEMS:
        if isinstance(exc, kind):
            return Problem(status, name, title, detail)
    if isinstance(exc, DecisionRefusedError):
        # A model's failure is worded for the agent (cause, endpoint, fix; no content, no secret); other
        # reasons' details may quote what was refused, so they stay in the worker's dead letter.
        why = f": {exc.detail}" if exc.reason == Rejection.MODEL_ERROR.value and exc.detail else ""
        return unprocessable("decision-refused", f"the worker refused the request: {exc.reason}{why}",
                             reason=exc.reason, decision_id=exc.decision_id)  # fmt: skip
    if isinstance(exc, TopicsMissingError | TopicsRefusedError):  # the operator's to fix; nothing sent
        return _topics_problem(exc)
    if not isinstance(exc, ClusterUnavailableError):
        _LOG.error("a client call failed: %s", type(exc).__name__)  # its message may hold a case's id
        return Problem(503, "request-failed", "Service unavailable", "the cluster could not complete the request; "
                       "retry it (with the same Idempotency-Key, a write is never made twice)",
                       {"Retry-After": "5"})  # fmt: skip
    return Problem(503, "cluster-unavailable", "Service unavailable", "the cluster did not answer in time; nothing "
                   "was written, unless its commit was sent and its answer lost: retry with the same "
                   "Idempotency-Key, which never writes twice", {"Retry-After": "5"})  # fmt: skip


def _topics_problem(exc: ClientError) -> Problem:
    """503 for a tenant whose topics are missing (named, with the command that makes them) or refused to the door."""
    if isinstance(exc, TopicsMissingError):
        return Problem(503, "topics-missing", "Service unavailable", str(exc), {"Retry-After": "30"})
    _LOG.error("the cluster refuses the door's principal a tenant's topics: %s", exc)
    return Problem(503, "topics-refused", "Service unavailable", "the cluster refuses this door the tenant's topics: "
                   "its operator must grant them (`dpm acl apply`) or create them", {"Retry-After": "30"})  # fmt: skip


def _caller(request: Request, keys: ApiKeys) -> _Caller:
    key = keys.bearer(request.headers.get("authorization", ""))
    if key is None:
        raise unauthorized()
    return _Caller(key)


def _check_media_type(request: Request) -> None:
    """415 for a body not declared JSON: every body under /v1 is one, and an undeclared one is not guessed at."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise Problem(415, "unsupported-media-type", "Unsupported media type",
                      "the Content-Type header must be application/json: the body is read as JSON only",
                      {"Accept-Post": "application/json"})  # fmt: skip


def _check_size(request: Request, limit: int) -> None:
    """413 for a body declared larger than the limit; 411 for a body of undeclared length (chunked)."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    declared = request.headers.get("content-length")
    if declared is None:
        raise Problem(411, "length-required", "Length required", "send the body with a Content-Length")
    try:
        size = int(declared)
    except ValueError:
        raise bad_request("Content-Length is not a number") from None
    if size > limit:
        raise too_large(size, limit)


def _task(body: DecideIn) -> TaskSpec:
    if body.task is not None:
        return door_checks.whole_task(body.task.domain, body.task.task, body.task.label_space)
    if body.domain is None:
        raise bad_request("domain or task: one is required")
    return door_checks.standing_task(body.domain)


def _pending(decision_id: str, hint: str = "") -> JSONResponse:
    """202: the decision is asked for and not in yet; its URL says where it will be.

    The id is percent-encoded in the URL: a trigger id may hold any printable character, and a
    header carries Latin-1 only.
    """
    url = f"/{VERSION}/decisions/{quote(decision_id, safe=':')}"
    return JSONResponse(Pending(decision_id=decision_id, url=url, hint=hint or None).model_dump(), status_code=202,
                        headers={"Location": url})  # fmt: skip
