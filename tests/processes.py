"""Runs Python snippets in fresh interpreters, to prove results do not depend on the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx


def run_python(script: str, hash_seed: str) -> str:
    """stdout of `script` in a new interpreter with the given PYTHONHASHSEED."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout


def dpm_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """`dpm ARGS` (as `python -m pipeline`) with this environment plus `env`; wide columns, so tables are whole."""
    child = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, env=child,
                          timeout=timeout_s, check=False)  # fmt: skip


def await_http(base: str, timeout_s: float = 60) -> None:
    """Waits until a server at `base` answers its /healthz (a `dpm api` just started), for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{base} did not come up"
        time.sleep(0.3)


def where_it_waits(proc: subprocess.Popen[bytes], log: Path, tail_chars: int = 12_000) -> str:
    """A `dpm` process's exit code, or its threads' stacks (SIGUSR1 writes them to its log); and its log's end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
    code = proc.poll()  # after the signal: a process that had not yet installed its handler is ended by it
    tail = log.read_text(errors="replace")[-tail_chars:] if log.exists() else "(no log)"
    return f"exit code {code}; its log ends (with its stacks, if running):\n{tail}"
