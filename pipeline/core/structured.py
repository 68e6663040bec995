"""Structured answers: the JSON shapes a model may be held to, and lenient readers of what it wrote.

A server that enforces a JSON schema (OpenAI-compatible `response_format`) returns these shapes
instead of the section text; the view and decision parsers accept both. A weak or cut-off model
writes broken JSON: whatever complete items can be read are kept, and the rest is a recorded problem.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

VIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "citations": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                },
                "required": ["text", "citations"],
                "additionalProperties": False,
            },
        },
        "reasoning": {"type": "array", "items": {"type": "string"}},
        "compliance_notes": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["facts", "reasoning", "compliance_notes"],
    "additionalProperties": False,
}


def decision_schema(label_space: Sequence[str]) -> dict[str, Any]:
    """The decision answer's shape; the label is one of the label space."""
    return {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": list(label_space)},
            "rationale": {"type": "string"},
            "notice": {"type": "string"},
        },
        "required": ["decision", "rationale", "notice"],
        "additionalProperties": False,
    }


_STRING = r'"((?:[^"\\]|\\.)*)"'
_FACT = re.compile(r'\{\s*"text"\s*:\s*' + _STRING + r'\s*,\s*"citations"\s*:\s*\[([\d\s,]*)\]\s*\}')
_LIST = r'"{key}"\s*:\s*\[((?:\s*' + _STRING + r"\s*,?)*)"


def looks_structured(text: str) -> bool:
    """True when the answer is (or starts as) a JSON object rather than section text."""
    return text.lstrip().startswith("{")


def read_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object in `text`, or None and why it could not be read."""
    try:
        value = orjson.loads(text.strip())
    except orjson.JSONDecodeError as exc:
        return None, f"malformed or cut-off JSON ({exc})"
    if not isinstance(value, dict):
        return None, "the JSON answer is not an object"
    return value, None


def _unescape(raw: str) -> str:
    try:
        decoded = orjson.loads(f'"{raw}"')
    except orjson.JSONDecodeError:
        return raw
    return decoded if isinstance(decoded, str) else raw


def salvage_facts(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every complete `{"text": ..., "citations": [...]}` item of a broken JSON answer, in order."""
    return [
        (_unescape(m.group(1)), tuple(int(n) for n in re.findall(r"\d+", m.group(2)))) for m in _FACT.finditer(text)
    ]


def salvage_strings(text: str, key: str) -> list[str]:
    """The complete strings of the array under `key` in a broken JSON answer."""
    match = re.search(_LIST.format(key=re.escape(key)), text)
    return [_unescape(s) for s in re.findall(_STRING, match.group(1))] if match else []


def salvage_string(text: str, key: str) -> str | None:
    """The string value under `key` in a broken JSON answer, if it was completed."""
    match = re.search(rf'"{re.escape(key)}"\s*:\s*' + _STRING, text)
    return _unescape(match.group(1)) if match else None
