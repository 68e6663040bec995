"""Loads published decisions, views, audits and triggers from their topics, indexed by decision id."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.kafka.dump import read_topic
from pipeline.kafka.topics import TopicNames


@dataclass
class PublishedOutputs:
    """Everything the workers published, as decoded JSON."""

    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    audits: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    triggers: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0


def _decoded(client_config: dict[str, str], topic: str) -> list[dict[str, Any]]:
    found = []
    for record in read_topic(client_config, topic):
        try:
            value = orjson.loads(record.value or b"")
        except orjson.JSONDecodeError:
            continue  # a malformed record is the producer's bug; the DLQ holds refused input
        if isinstance(value, dict):
            found.append(value)
    return found


def load_outputs(client_config: dict[str, str], names: TopicNames, *, with_audits: bool = True) -> PublishedOutputs:
    """Reads the output topics to their ends; counts decision ids published more than once."""
    outputs = PublishedOutputs()
    for decision in _decoded(client_config, names.decisions):
        if decision.get("decision_id") in outputs.decisions:
            outputs.duplicates += 1
        outputs.decisions[decision["decision_id"]] = decision
    for view in _decoded(client_config, names.views):
        outputs.views[view["decision_id"]] = view
    if with_audits:
        for audit in _decoded(client_config, names.audit):
            outputs.audits[audit["decision_id"]].append(audit)
    for trigger in _decoded(client_config, names.triggers):
        if "trigger_id" in trigger:
            outputs.triggers[trigger["trigger_id"]] = trigger
    return outputs


def await_decisions(
    client_config: dict[str, str],
    names: TopicNames,
    expected: int,
    timeout_s: float,
    progress: Callable[[int], None] | None = None,
) -> PublishedOutputs:
    """Polls the output topics (read_committed) until `expected` distinct decisions, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        outputs = load_outputs(client_config, names)
        if progress is not None:
            progress(len(outputs.decisions))
        if len(outputs.decisions) >= expected or time.monotonic() > deadline:
            return outputs
        time.sleep(1.0)
