"""A real OpenAI Agents SDK run (a scripted model in the SDK's Model interface): its steps land in its case, in order.

The decision is one tool the agent calls; the small local model cannot drive tool calls reliably,
so the model's answers are scripted, and everything else (the runner, tool execution, the hooks)
is the SDK's own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="the openai-agents extra: pip install '.[openai-agents]'")

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from pipeline.client import AsyncDecisionMemory  # noqa: E402
from pipeline.core.events import CaseRef  # noqa: E402
from pipeline.integrations.openai_agents import CaptureSteps, decision_tool  # noqa: E402
from pipeline.kafka.cluster.topics import TopicNames  # noqa: E402
from pipeline.keys.store import CaseKeys  # noqa: E402
from pipeline.services.cluster import pipeline_processes  # noqa: E402
from tests.integration.test_client_appends import case_log, client_settings  # noqa: E402
from tests.pipeline_support import create_topics, worker_env  # noqa: E402
from tests.processes import dpm_cli  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # this door's own behaviour (the client's runs on Kafka 4)
SUMMARY = "Application reviewed: loan of 120,000 over 20 years; credit verified. The file is decided."


@function_tool
def credit_report(applicant: str) -> str:
    """The credit bureau's report on an applicant."""
    return f"Credit bureau report for {applicant}: score 712, no defaults on record, income 84,000 per year."


def _call(name: str, arguments: dict[str, Any], n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", id=f"fc{n}", call_id=f"call{n}", name=name,
                                    arguments=json.dumps(arguments), status="completed")  # fmt: skip


def _message(text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(type="message", id="m1", role="assistant", status="completed", content=[part])


class ScriptedModel(Model):
    """The SDK's Model interface answering from a script: a tool call, the decision tool, then a message."""

    def __init__(self) -> None:
        self.script: list[list[Any]] = [[_call("credit_report", {"applicant": "J. Doe"}, 1)],
                                         [_call("request_decision", {}, 2)], [_message(SUMMARY)]]  # fmt: skip

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_an_agents_sdk_run_s_steps_land_in_order_and_its_decision_tool_decides(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)

    async def run() -> tuple[Any, int]:
        async with AsyncDecisionMemory("acme", settings=settings) as memory:
            capture = CaptureSteps(memory, "loan-7")
            decide = decision_tool(memory, "loan-7", domain="loan", budget=2_000)
            agent = Agent(name="underwriter", instructions="Review the loan application, then have it decided.",
                          model=ScriptedModel(), tools=[credit_report, decide])  # fmt: skip
            result = await Runner.run(
                agent, "Review J. Doe's loan application.", hooks=capture, run_config=RunConfig(tracing_disabled=True)
            )  # no trace export: offline
            return result, capture.appended

    with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        result, appended = asyncio.run(run())
    assert result.final_output == SUMMARY
    decided = json.loads(next(i.output for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"
                              and "decision_id" in str(i.output)))  # fmt: skip
    assert decided["label"] in ("APPROVE", "DENY", "REFER")
    assert appended == 3
    assert case_log(kafka_config, topic_names, CaseRef("acme", "loan-7"), case_keys) == [
        (1, 'credit_report {"applicant": "J. Doe"}'),
        (2, "Credit bureau report for J. Doe: score 712, no defaults on record, income 84,000 per year."),
        (3, SUMMARY),
    ]  # the decision tool's own call and answer are not steps of the case
    replayed = dpm_cli("replay", "--tenant", "acme", "--decision", decided["decision_id"],
                       env={"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix})  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert "MATCH" in replayed.stdout
