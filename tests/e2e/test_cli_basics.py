"""The `dpm` command as a user runs it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker


def test_help_lists_the_commands() -> None:
    result = dpm_cli("--help")
    assert result.returncode == 0
    for command in ("broker", "topics"):
        assert command in result.stdout


def test_broker_status_without_a_broker_says_so(tmp_path: Path) -> None:
    result = dpm_cli("broker", "status", env={"DPM_HOME": str(tmp_path)})
    assert result.returncode == 3
    assert "no local broker is running" in result.stdout


def test_topics_create_against_the_session_broker_is_idempotent(kafka_bootstrap: str) -> None:
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": f"cli-{os.getpid()}"}
    first = dpm_cli("topics", "create", "--partitions", "2", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created") == 10
    second = dpm_cli("topics", "create", "--partitions", "2", env=env)
    assert second.stdout.count("settings match") == 10
    conflict = dpm_cli("topics", "create", "--partitions", "3", env=env)
    assert conflict.returncode == 1
    assert "conflict" in conflict.stderr
    assert "Traceback" not in conflict.stderr


@pytest.mark.parametrize("command", [("replay", "--all"), ("worker",), ("baseline",)])
def test_a_command_that_needs_the_broker_says_at_once_that_none_answers(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    started = time.monotonic()
    result = dpm_cli(*command, env={"DPM_HOME": str(tmp_path), "DPM_BOOTSTRAP": "127.0.0.1:1"})
    took = time.monotonic() - started
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "127.0.0.1:1" in lines[0]
    assert "dpm broker up" in lines[0]
    assert "DPM_BOOTSTRAP" in lines[0]
    assert took < 6, f"{took:.1f} s (the broker check itself waits 2 s; the rest is start-up)"
