"""A stopping worker ends within its drain deadline, even when its loop is stuck inside a call that never returns."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

STUCK_LOOP = """
import threading
from pipeline.observability.logs import configure_json_logging
from pipeline.workers.lifecycle import run_until_stopped, stop_on_signals

configure_json_logging()
stop = stop_on_signals()
print("ready", flush=True)
run_until_stopped(threading.Event().wait, stop, {drain_s}, name="stuck-loop")  # waits forever, like a hung call
"""

FINISHING_LOOP = """
import time
from pipeline.workers.lifecycle import run_until_stopped, stop_on_signals

stop = stop_on_signals()
print("ready", flush=True)

def loop():
    while not stop.is_set():
        time.sleep(0.05)
    print("finished its batch", flush=True)

run_until_stopped(loop, stop, 30, name="loop")
"""


def _started(script: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_stops_a_stuck_worker_within_its_drain_deadline() -> None:
    proc = _started(STUCK_LOOP.format(drain_s=1.5))
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    took = time.monotonic() - sent
    assert 1.5 <= took < 6, took
    assert proc.returncode == 0
    assert "did not stop within the drain deadline of 1.5 s" in stderr


def test_a_loop_that_finishes_in_time_ends_normally() -> None:
    proc = _started(FINISHING_LOOP)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "finished its batch" in stdout
