"""Structured JSON logs carry decision id, tenant, case and trace fields."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest

from pipeline.observability.logs import CONTEXT_FIELDS, RateLimit, configure_json_logging


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


def test_repeated_warnings_are_rate_limited_and_counted() -> None:
    now = [0.0]
    limit = RateLimit(interval_s=10, clock=lambda: now[0])

    def warning(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("pipeline.kafka", logging.WARNING, __file__, 1, msg, args, None)

    first = warning("consumer error: %s", "broker down")
    assert limit.filter(first)
    assert not any(limit.filter(warning("consumer error: %s", "broker down")) for _ in range(3000))
    assert limit.filter(warning("another warning"))  # a different template is its own stream
    assert limit.filter(logging.LogRecord("x", logging.INFO, __file__, 1, "info", (), None))  # info passes
    now[0] = 11.0
    later = warning("consumer error: %s", "broker down")
    assert limit.filter(later)
    assert "3000 similar suppressed" in later.getMessage()


def test_sigusr1_makes_a_process_write_its_threads_stacks_and_go_on() -> None:
    """`kill -USR1` on a worker that looks stuck says where each thread waits, and the worker goes on."""
    script = ("import os, signal; from pipeline.observability.logs import configure_json_logging; "
              "configure_json_logging(); os.kill(os.getpid(), signal.SIGUSR1); print('went on')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "went on"
    assert "most recent call first" in done.stderr
