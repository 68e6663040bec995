"""`dpm mcp`: append a case's steps and get its decisions as MCP tools (the official SDK), over stdio or HTTP.

Over stdio the server acts for the one tenant it was started for (whoever runs it holds that
tenant's settings). Over streamable HTTP every request carries an API key of the HTTP API
(`Authorization: Bearer <key>`, read as the HTTP API reads it: services/api_keys.py), and acts for
that key's tenant. Arguments are checked as the HTTP API checks them (wire/door_checks.py), before
anything is written; a refused one is a tool error naming the argument and its rule, never its value.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import orjson
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from pipeline.client import (
    DEFAULT_BUDGET_CHARS,
    AsyncDecisionMemory,
    ClientError,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    KeyRevokedError,
    KeyServiceError,
    NotAdverseError,
)
from pipeline.core.contest import NOT_ADVICE
from pipeline.core.idempotency import InvalidIdempotencyKeyError
from pipeline.services.api_keys import ApiKeys
from pipeline.services.door_routes import Doors, ForwardFailedError
from pipeline.services.tenant_gate import TenantNotOnClusterError
from pipeline.wire import door_checks
from pipeline.wire.contest import reasons_outcome
from pipeline.wire.door_checks import RefusedArgumentError

_LOG = logging.getLogger("pipeline.mcp_server")

MemoryFor = Callable[[str], Awaitable[AsyncDecisionMemory]]
_BEARER = "Bearer "  # what the SDK takes off the Authorization header before it hands the rest on
INSTRUCTIONS = (
    "Decision memory for this agent's cases: append each step you take to its case with append_event "
    "(kind: document, tool, message...; the text as it is), then ask for a decision with request_decision. "
    "A decision's facts cite the steps they come from; explain_decision shows them with their text, and "
    "decision_reasons gives an adverse decision's principal reasons."
)


class ApiKeyVerifier:
    """Bearer tokens are the HTTP API's keys: a valid key's tenant is the token's client."""

    def __init__(self, keys: ApiKeys) -> None:
        self._keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        key = self._keys.bearer(_BEARER + token)  # the header again, read by the HTTP API's one rule
        if key is None or key.admin:
            return None
        return AccessToken(token=token, client_id=key.tenant, scopes=[])


_KEY_SERVICE_TOLD = {
    "key-revoked": "the tenant's key-encryption key is disabled or revoked at its key service: its cases are refused "
    "until the key's owner enables it again",
    "key-service-unavailable": "the tenant's key service did not answer; nothing was decided or written: retry (with "
    "the same idempotency key, a request is sent again and nothing is written twice)",
}


@contextmanager
def _told() -> Iterator[None]:
    """A refused argument or a failed call as a tool error that says what is wrong (never a value sent)."""
    try:
        yield
    except (RefusedArgumentError, TenantNotOnClusterError, ClientError, InvalidIdempotencyKeyError,
            ForwardFailedError) as exc:  # fmt: skip
        if isinstance(exc, DecisionRefusedError) and exc.reason in _KEY_SERVICE_TOLD:  # the worker's detail names
            raise ToolError(_KEY_SERVICE_TOLD[exc.reason]) from exc  # the provider: the operator's to read
        raise ToolError(str(exc)) from exc
    except KeyServiceError as exc:  # the provider and what to check are the operator's: in the server's log
        _LOG.warning("the key service failed a tool call: %s", exc)
        told = _KEY_SERVICE_TOLD["key-revoked" if isinstance(exc, KeyRevokedError) else "key-service-unavailable"]
        raise ToolError(told) from exc


def build_server(memory_for: MemoryFor, tenant: str | None, *, max_wait_s: float, keys: ApiKeys | None = None,
                 url: str = "http://127.0.0.1:8089", broker_wait_s: float = 10.0,
                 doors: Doors | None = None) -> MCPServer:  # fmt: skip
    """The server: for `tenant` (stdio), or for each request's key's tenant (`keys`, streamable HTTP at `url`).

    `max_wait_s` is the longest wait_s a tool takes (DPM_API_MAX_WAIT_S, as the HTTP API's); `broker_wait_s`
    how long a write waits for the cluster before the tool says it is not answering (DPM_API_BROKER_WAIT_S).
    `doors` (streamable HTTP): this door among the door replicas; an append for a case another door
    owns is forwarded to that door's HTTP API with the caller's key (services/door_routes.py).
    """
    auth = None
    if keys is not None:
        auth = AuthSettings.model_validate({"issuer_url": url, "resource_server_url": url,
                                            "validate_token_resource": False})  # fmt: skip
    server: MCPServer = MCPServer("dpm", instructions=INSTRUCTIONS, auth=auth,
                                  token_verifier=None if keys is None else ApiKeyVerifier(keys))  # fmt: skip

    async def memory() -> AsyncDecisionMemory:
        token = get_access_token()
        caller = token.client_id if token is not None else tenant
        if caller is None:
            raise ToolError("no tenant: this server takes an API key (Authorization: Bearer <key>)")
        return await memory_for(caller)

    _case_tools(server, memory, max_wait_s, broker_wait_s, doors)
    _decision_tools(server, memory, max_wait_s)
    return server


def _case_tools(server: MCPServer, memory: Callable[[], Awaitable[AsyncDecisionMemory]], max_wait_s: float,
                broker_wait_s: float, doors: Doors | None) -> None:  # fmt: skip
    """The tools and the resource an agent works a case with: its steps in, a decision asked for, its decisions."""

    @server.tool()
    async def append_event(case_id: str, kind: str, text: str, idempotency_key: str | None = None,
                           expected_seq: int | None = None) -> dict[str, int]:  # fmt: skip
        """Append one step to a case (after its last); returns its seq in the case and its log position.

        kind: a label of 1 to 100 characters, no control characters; text: at most 1,000,000 characters, no NUL.
        expected_seq: the case's last seq as you saw it (0 for a new case); if the case has moved on, nothing is
        written and the error gives its current seq.
        """
        with _told():
            door_checks.case_id(case_id)
            door_checks.event(kind, text)
            door_checks.expected_seq(expected_seq)
            client = await memory()
            if doors is not None:
                forwarded = await _forwarded_append(
                    doors, client, case_id, (kind, text), idempotency_key=idempotency_key, expected_seq=expected_seq
                )
                if forwarded is not None:
                    return forwarded
            done = await client.append(case_id, kind=kind, text=text, idempotency_key=idempotency_key,
                                       expected_seq=expected_seq, timeout=broker_wait_s)  # fmt: skip
        return {"seq": done.seq, "partition": done.position.partition, "offset": done.position.offset}

    @server.tool()
    async def request_decision(case_id: str, domain: str, budget_chars: int = DEFAULT_BUDGET_CHARS,
                               wait_s: float | None = None,
                               idempotency_key: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Ask for a decision of the case as it stands, waiting up to wait_s (else its id, for get_decision).

        The task is the domain's standing one: loan, claim, prior_auth or tax_exam. budget_chars:
        200 to 1,000,000. wait_s: 0 up to the server's maximum (DPM_API_MAX_WAIT_S); not given, 30 s
        or that maximum when lower.
        """
        with _told():
            door_checks.case_id(case_id)
            task = door_checks.standing_task(domain)
            door_checks.budget(budget_chars)
            waited = door_checks.wait_s(wait_s, max_wait_s)
            client = await memory()
            try:
                decision_id = await client.request(case_id, task=task, budget=budget_chars,
                                                   idempotency_key=idempotency_key, timeout=broker_wait_s)  # fmt: skip
                return (await client.wait(decision_id, waited)).to_json()
            except DecisionTimeoutError as exc:
                return {"decision_id": exc.decision_id, "status": "pending", **({"hint": exc.hint} if exc.hint else {})}

    @server.resource("dpm://cases/{case_id}/decisions", mime_type="application/json")
    async def case_decisions(case_id: str) -> list[str]:
        """The ids of a case's published decisions, oldest first."""
        with _told():
            door_checks.case_id(case_id)
            return await (await memory()).decisions_of(case_id)


async def _forwarded_append(
    doors: Doors, client: AsyncDecisionMemory, case_id: str, event: tuple[str, str], *,
    idempotency_key: str | None, expected_seq: int | None,
) -> dict[str, int] | None:  # fmt: skip
    """The owning door's answer when another door owns the case's partition (its HTTP API, the caller's key)."""
    owner = await doors.owner(*await client.partition_of(case_id))
    token = get_access_token()
    if owner is None or token is None:
        return None
    headers = {"authorization": f"{_BEARER}{token.token}", "content-type": "application/json"}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    if expected_seq is not None:
        headers["if-match"] = f'"{expected_seq}"'
    body = orjson.dumps({"events": [{"kind": event[0], "text": event[1]}]})
    answer = await doors.forward(owner, f"/v1/cases/{quote(case_id, safe='')}/events", body, headers)
    if answer is None:
        return None  # the owner is gone: appended here, taking its partition over
    try:
        document = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        document = {}
    if answer.status != 201:
        raise ToolError(str(document.get("detail") or f"the door owning the case answered {answer.status}"))
    first = document["events"][0]
    return {"seq": first["seq"], "partition": first["partition"], "offset": first["offset"]}


def _decision_tools(server: MCPServer, memory: Callable[[], Awaitable[AsyncDecisionMemory]],
                    max_wait_s: float) -> None:  # fmt: skip
    """The tools that read a decision: itself, its explanation, an adverse decision's reasons."""

    @server.tool()
    async def get_decision(decision_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """A decision by id (waiting up to wait_s, at most the server's maximum, for one asked for but not in yet)."""
        with _told():
            door_checks.decision_id(decision_id)
            waited = door_checks.wait_s(wait_s, max_wait_s)
            client = await memory()
            try:
                return (await client.collect(decision_id, waited)).to_json()
            except DecisionNotFoundError as exc:
                raise ToolError("no decision with this id is published for this tenant") from exc
            except DecisionTimeoutError:
                return {"decision_id": decision_id, "status": "pending"}

    @server.tool()
    async def explain_decision(decision_id: str) -> dict[str, Any]:
        """Why a decision was made: its label, rationale and facts, each with the text of the steps it cites."""
        with _told():
            door_checks.decision_id(decision_id)
            decision = (await (await memory()).decision(decision_id)).to_json()
        return {k: decision[k] for k in ("decision_id", "label", "rationale", "facts", "compliance", "replay_command")}

    @server.tool()
    async def decision_contests(decision_id: str) -> list[dict[str, Any]]:
        """The decision's contests (what-ifs, decisive analyses, reasons asked by auditors), oldest first.

        Each with its replay status: MATCH when every re-decision it records reproduces from its
        recorded answers (no model call is made).
        """
        with _told():
            door_checks.decision_id(decision_id)
            return [contest.to_json() for contest in await (await memory()).contests(decision_id)]

    @server.tool()
    async def decision_reasons(decision_id: str) -> dict[str, Any]:
        """The principal reasons of an adverse decision (a denial, a referral), weightiest first.

        Each is a fact of the decision's view with the steps it cites, and whether leaving those steps
        out changes the decision (found by re-deciding without them: computed, not legal advice).
        """
        with _told():
            door_checks.decision_id(decision_id)
            try:
                given = await (await memory()).reasons(decision_id)
            except NotAdverseError as exc:
                raise ToolError("the decision's domain does not mark its label adverse: it owes no reasons") from exc
        outcome = reasons_outcome(given)
        return {"decision_id": decision_id, "label": outcome.pop("original_label"), **outcome, "note": NOT_ADVICE}
