"""Structured JSON logs: one object per line, with decision id, tenant, case and trace fields when known."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import time
from collections.abc import Callable

from pythonjsonlogger.json import JsonFormatter

# Fields a log call may pass in `extra=`; always present in the output (null when unknown) so log
# pipelines can index them without guessing.
CONTEXT_FIELDS = ("decision_id", "tenant", "case_id", "trace_id", "worker_id")
_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s " + " ".join(f"%({f})s" for f in CONTEXT_FIELDS)
_RENAME = {"asctime": "time", "levelname": "level", "name": "logger"}


class _ContextDefaults(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True


class RateLimit(logging.Filter):
    """Lets one record per logger and message template through every `interval_s`, then counts.

    A stuck read or a flapping broker repeats the same warning thousands of times; the first of a
    run is logged, the rest are counted and the count rides on the next one let through.
    """

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[tuple[str, object], float] = {}
        self._suppressed: dict[tuple[str, object], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.msg)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            record.msg = f"{record.msg} ({suppressed} similar suppressed in the last {self.interval_s:g} s)"
        return True


def json_logging_config(level: str = "INFO") -> dict[str, object]:
    """The same JSON format as a logging.config.dictConfig (faust's worker takes its logging this way)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "fmt": _FORMAT, "rename_fields": _RENAME}},
        "filters": {"context": {"()": _ContextDefaults}, "rate": {"()": RateLimit}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["context", "rate"]}},
        "root": {"handlers": ["stderr"], "level": level},
    }


def dump_stacks_on_sigusr1() -> None:
    """SIGUSR1 writes every thread's stack to the process's stderr; nothing is registered when it has no descriptor.

    The stderr the process started with: faust replaces sys.stderr with a logging proxy that has no
    file descriptor, and a test's capture may too.
    """
    stream = sys.__stderr__ or sys.stderr
    try:
        # Registered anew: faulthandler does not install its handler again for a signal it thinks it holds,
        # and asyncio, removing mode's handler, has put the default action back.
        faulthandler.unregister(signal.SIGUSR1)
        faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)
    except (AttributeError, ValueError, OSError, NotImplementedError):
        return


def configure_json_logging(level: int = logging.INFO, stream: object = None) -> None:
    """Routes every logger to one JSON-lines handler on stderr (or `stream`); SIGUSR1 dumps every thread's stack.

    The dump (Python's faulthandler, on stderr beside the logs) says where a process that looks
    stuck is waiting, without stopping it: `kill -USR1 <pid>`, as jstack is for a JVM.
    """
    if stream is None:
        dump_stacks_on_sigusr1()
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(JsonFormatter(_FORMAT, rename_fields=_RENAME))
    handler.addFilter(_ContextDefaults())
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
