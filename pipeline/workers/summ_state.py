"""The baseline's per-step records: what a Summ-only step stored, and how a decision is rebuilt from them.

Pure functions over JSON-able dicts, so the faust agents stay thin and this logic is unit-tested
without a broker.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.core.events import Event, LogPosition
from pipeline.core.model import ModelRequest, ModelResponse, Usage
from pipeline.core.run import ModelCall, SummMemory
from pipeline.core.view import Fact, MemoryView


def memory_to_json(memory: SummMemory) -> dict[str, Any]:
    """A step's memory as JSON: the view's sections (not its text, which need not round-trip) and problems."""
    view = memory.view
    return {
        "facts": [[f.text, list(f.citations)] for f in view.facts],
        "reasoning": list(view.reasoning),
        "compliance": list(view.compliance),
        "problems": list(memory.problems),
        "cut": memory.cut,
    }


def memory_from_json(raw: Mapping[str, Any]) -> SummMemory:
    """Inverse of memory_to_json."""
    view = MemoryView(
        tuple(Fact(text, tuple(cites)) for text, cites in raw["facts"]),
        tuple(raw["reasoning"]),
        tuple(raw["compliance"]),
    )
    return SummMemory(view, tuple(raw["problems"]), int(raw["cut"]))


def call_to_json(call: ModelCall) -> dict[str, Any]:
    """A model call as JSON, raw response bytes included, so its audit record can be published later."""
    response = call.response
    return {
        "request": call.request.wire(),
        "raw_b64": base64.b64encode(response.raw).decode("ascii"),
        "text": response.text,
        "model": response.model,
        "usage": [response.usage.input_tokens, response.usage.output_tokens],
        "cost_usd": response.cost_usd,
        "latency_s": response.latency_s,
        "stop_reason": response.stop_reason,
    }


def call_from_json(raw: Mapping[str, Any]) -> ModelCall:
    """Inverse of call_to_json."""
    response = ModelResponse(
        text=raw["text"],
        raw=base64.b64decode(raw["raw_b64"]),
        model=raw["model"],
        usage=Usage(*raw["usage"]),
        cost_usd=float(raw["cost_usd"]),
        latency_s=float(raw["latency_s"]),
        stop_reason=raw["stop_reason"],
    )
    return ModelCall(ModelRequest.from_wire(raw["request"]), response)


def step_record(event: Event, position: LogPosition, memory: SummMemory, calls: Sequence[ModelCall]) -> dict[str, Any]:
    """What one step stores: the event, where it was read, the memory after it and the call it made (if any)."""
    return {
        "event": event.wire(),
        "position": [position.partition, position.offset],
        "memory": memory_to_json(memory),
        "calls": [call_to_json(c) for c in calls],
    }
