"""LangGraph (and any LangChain runnable): an agent's steps appended to its case as they happen; a decision node.

    memory = DecisionMemory(tenant="acme")
    capture = CaptureSteps(memory, "case-7")
    graph.add_node("decide", decision_node(memory, "case-7", domain="loan"))
    graph.compile().invoke(state, config={"callbacks": [capture]})

The callback sees every chat model answer (its text, and each tool call with its arguments) and
every tool result, and appends them in the order the graph produced them (it runs inline, so an
async graph does not reorder them). The decision node asks for the case's decision as it stands
and puts it in the state under `decision` (the JSON the HTTP API gives).
"""

from __future__ import annotations

from typing import Any, Protocol

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from pipeline.client import DecisionMemory
from pipeline.client.memory import DEFAULT_BUDGET_CHARS
from pipeline.integrations.steps import MODEL_MESSAGE, TOOL_CALL, TOOL_RESULT, tool_call_text


class DecisionNode(Protocol):
    """A graph node: called with the graph's state (whatever its schema: it reads none of it)."""

    def __call__(self, state: Any) -> dict[str, Any]: ...  # noqa: ANN401 - any graph's state


class CaptureSteps(BaseCallbackHandler):
    """Appends a LangGraph agent's model messages, tool calls and tool results to one case, in order."""

    run_inline = True  # in an async graph too: steps are appended in the order they happen
    raise_error = True  # a step that cannot be appended stops the run: the case must not miss it

    def __init__(self, memory: DecisionMemory, case_id: str) -> None:
        self.memory, self.case_id = memory, case_id
        self.appended = 0

    def _append(self, kind: str, text: str) -> None:
        self.memory.append(self.case_id, kind=kind, text=text)
        self.appended += 1

    def on_llm_end(self, response: LLMResult, **_: Any) -> None:  # noqa: ANN401 - LangChain's run ids and tags
        for generations in response.generations:
            for generation in generations:
                message = generation.message if isinstance(generation, ChatGeneration) else None
                self._model_answer(message, generation.text)

    def _model_answer(self, message: BaseMessage | None, text: str) -> None:
        content = message.text if message is not None else text
        if content.strip():
            self._append(MODEL_MESSAGE, content)
        for call in getattr(message, "tool_calls", None) or []:
            self._append(TOOL_CALL, tool_call_text(call["name"], call.get("args", {})))

    def on_tool_end(self, output: object, **_: Any) -> None:  # noqa: ANN401 - LangChain's run ids and tags
        text = output.text if isinstance(output, ToolMessage) else str(output)
        self._append(TOOL_RESULT, text)


def decision_node(memory: DecisionMemory, case_id: str, *, domain: str, budget: int = DEFAULT_BUDGET_CHARS,
                  timeout: float = 120.0) -> DecisionNode:  # fmt: skip
    """A graph node that decides the case as it stands and returns `{"decision": ...}` for the state."""

    def decide(state: Any) -> dict[str, Any]:  # noqa: ANN401 - any graph's state
        del state  # the case's log is the memory: every step is in it already
        decision = memory.decide(case_id, domain=domain, budget=budget, timeout=timeout)
        return {"decision": decision.to_json()}

    return decide
