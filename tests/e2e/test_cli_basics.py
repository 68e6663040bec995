"""The `dpm` command as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _dpm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=180,
        check=False,
    )


def test_help_lists_the_commands() -> None:
    result = _dpm("--help")
    assert result.returncode == 0
    for command in ("broker", "topics"):
        assert command in result.stdout


def test_broker_status_without_a_broker_says_so(tmp_path: Path) -> None:
    result = _dpm("broker", "status", env={"DPM_HOME": str(tmp_path)})
    assert result.returncode == 3
    assert "no local broker is running" in result.stdout


def test_topics_create_against_the_session_broker_is_idempotent(kafka_bootstrap: str) -> None:
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": f"cli-{os.getpid()}"}
    first = _dpm("topics", "create", "--partitions", "2", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created") == 6
    second = _dpm("topics", "create", "--partitions", "2", env=env)
    assert second.stdout.count("settings match") == 6
    conflict = _dpm("topics", "create", "--partitions", "3", env=env)
    assert conflict.returncode == 1
    assert "conflict" in conflict.stderr
    assert "Traceback" not in conflict.stderr
