"""The events an agent's steps become, whatever the framework: one kind per kind of step, the text as it was."""

from __future__ import annotations

import json
from typing import Any

MODEL_MESSAGE = "model-message"  # what the model said
TOOL_CALL = "tool-call"  # a tool the model called, and its arguments
TOOL_RESULT = "tool-result"  # what the tool answered


def tool_call_text(name: str, arguments: Any) -> str:  # noqa: ANN401 - a framework's arguments (JSON text or mapping)
    """`name {"arg": ...}`: the call as the model made it, its arguments as canonical JSON when they parse."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"{name} {arguments}"
    return f"{name} {json.dumps(arguments, sort_keys=True, ensure_ascii=False)}"
