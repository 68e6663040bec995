"""Structured JSON logs carry decision id, tenant, case and trace fields."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from pipeline.observability.logs import CONTEXT_FIELDS, configure_json_logging


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_json_logging(stream=stream)
    yield stream
    root.handlers[:] = saved
    root.setLevel(level)


def test_log_lines_are_json_with_the_decision_context(captured: io.StringIO) -> None:
    logging.getLogger("pipeline.test").info(
        "decided %s", "t1:dpm", extra={"decision_id": "t1:dpm", "tenant": "acme", "case_id": "c1", "trace_id": "t1"}
    )
    logging.getLogger("pipeline.test").warning("no context here")
    first, second = (orjson.loads(line) for line in captured.getvalue().splitlines())
    assert first["message"] == "decided t1:dpm"
    assert (first["decision_id"], first["tenant"], first["case_id"], first["trace_id"]) == (
        "t1:dpm",
        "acme",
        "c1",
        "t1",
    )
    assert first["level"] == "INFO"
    assert set(CONTEXT_FIELDS) <= set(second)
    assert second["decision_id"] is None
