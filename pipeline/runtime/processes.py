"""Liveness and shutdown of local background processes, recognised by their command line."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path


def process_alive(pid: int, marker: bytes) -> bool:
    """True when `pid` is a live (not zombie) process whose command line contains `marker`.

    The marker guards against a recycled pid: a recorded pid now held by another program is not ours.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return marker in cmdline and state != "Z"


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # exited between the liveness check and the signal
        os.kill(pid, signum)


def terminate(pids: Sequence[int], marker: bytes, timeout_s: float) -> list[int]:
    """Stops the processes: SIGTERM for a controlled shutdown, SIGKILL for what runs after `timeout_s`.

    Returns the pids that were alive when asked.
    """
    alive = [p for p in pids if process_alive(p, marker)]
    for pid in alive:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(process_alive(p, marker) for p in alive):
        time.sleep(0.1)
    for pid in alive:
        if process_alive(pid, marker):
            _signal(pid, signal.SIGKILL)
    return alive
