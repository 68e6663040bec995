"""The OpenAI Agents SDK: an agent's steps appended to its case as they happen; a decision is one tool.

    memory = AsyncDecisionMemory(tenant="acme")
    agent = Agent(name="underwriter", tools=[..., decision_tool(memory, "case-7", domain="loan")])
    await Runner.run(agent, "Review the application.", hooks=CaptureSteps(memory, "case-7"))

The run hooks see every model response (its text, and each function call with its arguments) and
every tool result, and append them in the order the run produced them. The decision tool asks for
the case's decision as it stands and answers with it as JSON; its own call and answer are not
appended (a decision is not a step of the case, and the next decision must not read the last).
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, ModelResponse, RunContextWrapper, RunHooks, function_tool

from pipeline.client import AsyncDecisionMemory
from pipeline.client.memory import DEFAULT_BUDGET_CHARS
from pipeline.integrations.steps import MODEL_MESSAGE, TOOL_CALL, TOOL_RESULT, tool_call_text

DECISION_TOOL = "request_decision"


class CaptureSteps(RunHooks[Any]):
    """Appends an agent run's model messages, tool calls and tool results to one case, in order."""

    def __init__(self, memory: AsyncDecisionMemory, case_id: str) -> None:
        self.memory, self.case_id = memory, case_id
        self.appended = 0

    async def _append(self, kind: str, text: str) -> None:
        await self.memory.append(self.case_id, kind=kind, text=text)
        self.appended += 1

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        del context, agent  # the hook's signature: the case is this hook's own
        for item in response.output:
            if item.type == "message":
                text = "".join(getattr(part, "text", "") for part in item.content)
                if text.strip():
                    await self._append(MODEL_MESSAGE, text)
            elif item.type == "function_call" and item.name != DECISION_TOOL:
                await self._append(TOOL_CALL, tool_call_text(item.name, item.arguments))

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Any, tool: Any, result: object) -> None:  # noqa: ANN401 - the SDK's agent and tool unions
        del context, agent
        if getattr(tool, "name", None) != DECISION_TOOL:
            await self._append(TOOL_RESULT, str(result))


def decision_tool(memory: AsyncDecisionMemory, case_id: str, *, domain: str, budget: int = DEFAULT_BUDGET_CHARS,
                  timeout: float = 120.0) -> FunctionTool:  # fmt: skip
    """A tool the agent calls to have its case decided from every step so far; it answers the decision as JSON."""

    async def request_decision() -> str:
        decision = await memory.decide(case_id, domain=domain, budget=budget, timeout=timeout)
        return json.dumps(decision.to_json())

    request_decision.__doc__ = (f"Decide case {case_id} ({domain}) from every step taken so far: its label, "
                                "rationale and the facts with the steps they cite.")  # fmt: skip
    return function_tool(request_decision, name_override=DECISION_TOOL)
