"""A real LangGraph agent loop (its scripted chat model) whose steps land in its case in order, then a decision."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

langgraph = pytest.importorskip("langgraph", reason="the langgraph extra: pip install '.[langgraph]'")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from pipeline.client import DecisionMemory  # noqa: E402
from pipeline.core.events import CaseRef  # noqa: E402
from pipeline.integrations.langgraph import CaptureSteps, decision_node  # noqa: E402
from pipeline.kafka.cluster.topics import TopicNames  # noqa: E402
from pipeline.keys.store import CaseKeys  # noqa: E402
from pipeline.services.cluster import pipeline_processes  # noqa: E402
from tests.integration.test_client_appends import case_log, client_settings  # noqa: E402
from tests.pipeline_support import create_topics, worker_env  # noqa: E402
from tests.processes import dpm_cli  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]  # this door's own behaviour (the client's runs on Kafka 4)


@tool
def credit_report(applicant: str) -> str:
    """The credit bureau's report on an applicant."""
    return f"Credit bureau report for {applicant}: score 712, no defaults on record, debt-to-income 0.28."


@tool
def verify_income(applicant: str) -> str:
    """The applicant's verified annual income."""
    return f"Income verification for {applicant}: 84,000 per year, employed 6 years."


SUMMARY = "Application reviewed: loan of 120,000 over 20 years; credit and income verified."


class State(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], add_messages]
    decision: dict[str, Any]


def _scripted_model() -> GenericFakeChatModel:
    """What a model would answer in this loop: two tool calls, then its summary."""
    calls = [AIMessage(content="", tool_calls=[{"name": "credit_report", "args": {"applicant": "J. Doe"}, "id": "c1"}]),
             AIMessage(content="Checking income next.",
                       tool_calls=[{"name": "verify_income", "args": {"applicant": "J. Doe"}, "id": "c2"}]),
             AIMessage(content=SUMMARY)]  # fmt: skip
    return GenericFakeChatModel(messages=iter(calls))


def test_a_langgraph_agent_s_steps_land_in_order_and_its_decision_node_decides(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    model = _scripted_model()
    with DecisionMemory("acme", settings=client_settings(kafka_bootstrap, topic_names, tmp_path)) as memory:
        graph: StateGraph[State, None, State, State] = StateGraph(State)
        graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node("tools", ToolNode([credit_report, verify_income]))
        graph.add_node("decide", decision_node(memory, "loan-42", domain="loan", budget=2_000))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "decide"})
        graph.add_edge("tools", "agent")
        graph.add_edge("decide", END)
        capture = CaptureSteps(memory, "loan-42")
        with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
            final = graph.compile().invoke({"messages": [HumanMessage("Review J. Doe's loan application.")]},
                                           config={"callbacks": [capture]})  # fmt: skip
        decided = memory.decision(final["decision"]["decision_id"])
    assert capture.appended == 6
    assert case_log(kafka_config, topic_names, CaseRef("acme", "loan-42"), case_keys) == [
        (1, 'credit_report {"applicant": "J. Doe"}'),
        (2, "Credit bureau report for J. Doe: score 712, no defaults on record, debt-to-income 0.28."),
        (3, "Checking income next."),
        (4, 'verify_income {"applicant": "J. Doe"}'),
        (5, "Income verification for J. Doe: 84,000 per year, employed 6 years."),
        (6, SUMMARY),
    ]  # every step, in the order the graph took them
    assert decided.record.events_count == 6
    assert {c.kind for f in decided.facts for c in f.cites} <= {"model-message", "tool-call", "tool-result"}
    assert final["decision"]["label"] in ("APPROVE", "DENY", "REFER")
    replayed = dpm_cli("replay", "--tenant", "acme", "--decision", decided.decision_id,
                       env={"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix})  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert "MATCH" in replayed.stdout
