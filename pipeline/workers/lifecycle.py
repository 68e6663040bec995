"""Process lifecycle shared by the workers: identity, stop signals, a bounded drain."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable

_LOG = logging.getLogger("pipeline.workers")


def default_worker_id(prefix: str) -> str:
    """Unique per process: host, pid and a random suffix (a restarted process is a new member)."""
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, so the loop finishes its batch and leaves the group cleanly."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        _LOG.info("signal %s: stopping after the current batch", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def run_until_stopped(work: Callable[[], None], stop: threading.Event, drain_s: float, name: str) -> None:
    """Runs `work` on a thread of its own; once `stop` is set, waits `drain_s` for it to end, then exits the process.

    The main thread only waits, so it is free to run signal handlers: a worker whose loop is inside
    a client library call that does not return (a Kafka call past its timeout, say) still hears
    SIGTERM, and the drain deadline bounds how long stopping may take. Leaving without finishing is
    safe: whatever was not committed is invisible to readers and consumed again by the next owner.
    An exception `work` raises is raised here.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            failure.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    while thread.is_alive() and not stop.is_set():
        thread.join(0.5)  # short waits: a signal handler runs between them
    thread.join(drain_s)
    if thread.is_alive():
        _LOG.error("%s did not stop within the drain deadline of %g s; exiting without it", name, drain_s)
        logging.shutdown()
        os._exit(0)
    if failure:
        raise failure[0]
