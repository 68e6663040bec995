"""The MCP tools' arguments, without a broker: refused with a tool error that says what is wrong, before any write."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.client import AsyncDecisionMemory, EventPosition
from pipeline.core.events import LogPosition
from pipeline.mcp_server.server import ApiKeyVerifier, build_server
from pipeline.services.api_keys import ApiKeys

PRIVATE_TEXT = "Applicant income verified: 84,000"


class RecordingMemory:
    """A tenant's client that records every write the tools make (none, for a refused argument)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Any]] = []

    async def append(self, case_id: str, *, kind: str, text: str, idempotency_key: str | None = None) -> EventPosition:
        self.writes.append(("append", case_id))
        return EventPosition(case_id, 1, LogPosition(0, 0))

    async def request(self, case_id: str, **asked: Any) -> str:
        self.writes.append(("request", asked))
        return "k-1:dpm"


def _call(name: str, arguments: dict[str, Any], max_wait_s: float = 60.0) -> tuple[str, RecordingMemory]:
    """The tool error's text (the call must fail) and the memory the tool was given."""
    memory = RecordingMemory()

    async def memory_for(tenant: str) -> AsyncDecisionMemory:
        return cast(AsyncDecisionMemory, memory)

    server = build_server(memory_for, "acme", max_wait_s=max_wait_s)

    async def run() -> str:
        try:
            result = await server.call_tool(name, arguments)
        except ToolError as exc:
            return str(exc)
        assert getattr(result, "is_error", False), result
        return " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))

    return anyio.run(run), memory


@pytest.mark.parametrize(
    ("name", "arguments", "said"),
    [
        (
            "append_event",
            {"case_id": "bad id/" + PRIVATE_TEXT[:9], "kind": "k", "text": PRIVATE_TEXT},
            "case_id: must be",
        ),
        ("append_event", {"case_id": "c", "kind": "doc\x01", "text": PRIVATE_TEXT}, "kind: must be"),
        ("append_event", {"case_id": "c", "kind": "doc\n", "text": PRIVATE_TEXT}, "kind: must be"),
        ("append_event", {"case_id": "c", "kind": "doc", "text": PRIVATE_TEXT + "\x00"}, "text: must be"),
        ("append_event", {"case_id": "c", "kind": "doc", "text": "x" * 3_000_000}, "text: must be at most 1,000,000"),
        ("request_decision", {"case_id": "c", "domain": "astrology"}, "domain: is not a known domain"),
        ("request_decision", {"case_id": "c", "domain": "loan", "budget_chars": 10}, "budget_chars: must be 200"),
        ("request_decision", {"case_id": "c", "domain": "loan", "wait_s": 61}, "wait_s: must be a number"),
        ("get_decision", {"decision_id": PRIVATE_TEXT}, "decision_id: is not a decision id"),
        ("get_decision", {"decision_id": "k-1:dpm", "wait_s": 301}, "wait_s: must be a number of seconds from 0 to 60"),
        ("explain_decision", {"decision_id": "k-1"}, "decision_id: is not a decision id"),
        ("decision_reasons", {"decision_id": "k-1:dpm\n"}, "decision_id: is not a decision id"),
        ("decision_contests", {"decision_id": "k-1"}, "decision_id: is not a decision id"),
    ],
)
def test_a_bad_argument_is_a_tool_error_that_says_what_and_nothing_is_written(
    name: str, arguments: dict[str, Any], said: str
) -> None:
    told, memory = _call(name, arguments)
    assert said in told, told
    assert PRIVATE_TEXT[:12] not in told  # the rule, never the value
    assert "x" * 50 not in told
    assert memory.writes == []  # refused before a trigger or an event was written


def test_the_verifier_reads_the_bearer_as_the_http_api_does(tmp_path: Path) -> None:
    keys = ApiKeys(tmp_path / "api-keys.json")
    key = keys.add("acme")[1]
    verifier = ApiKeyVerifier(keys)
    # the SDK hands on what follows "Bearer ": with two spaces, " <key>", which the HTTP API accepts too
    for token in (key, " " + key, "  " + key):
        verified = anyio.run(verifier.verify_token, token)
        assert verified is not None
        assert verified.client_id == "acme"
    assert anyio.run(verifier.verify_token, "\t" + key) is None
    assert keys.bearer("Bearer  " + key) is not None


def test_a_stdio_server_for_an_invalid_tenant_exits_saying_so_before_reaching_a_broker() -> None:
    result = CliRunner().invoke(app, ["mcp", "--tenant", "Bad tenant/" + PRIVATE_TEXT[:8]],
                                env={"DPM_BOOTSTRAP": "127.0.0.1:1", "COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 2
    assert "--tenant: must be 1 to 200 letters" in result.output
    assert PRIVATE_TEXT[:8] not in result.output
