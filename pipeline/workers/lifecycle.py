"""Process lifecycle shared by the workers: identity, stop signals, logging."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid


def default_worker_id(prefix: str) -> str:
    """Unique per process: host, pid and a random suffix (a restarted process is a new member)."""
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, so the loop finishes its batch and leaves the group cleanly."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        logging.getLogger("pipeline.workers").info("signal %s: stopping after the current batch", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
