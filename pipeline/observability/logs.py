"""Structured JSON logs: one object per line, with decision id, tenant, case and trace fields when known."""

from __future__ import annotations

import logging
import sys

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


def json_logging_config(level: str = "INFO") -> dict[str, object]:
    """The same JSON format as a logging.config.dictConfig (faust's worker takes its logging this way)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "fmt": _FORMAT, "rename_fields": _RENAME}},
        "filters": {"context": {"()": _ContextDefaults}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["context"]}},
        "root": {"handlers": ["stderr"], "level": level},
    }


def configure_json_logging(level: int = logging.INFO, stream: object = None) -> None:
    """Routes every logger to one JSON-lines handler on stderr (or `stream`)."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(JsonFormatter(_FORMAT, rename_fields=_RENAME))
    handler.addFilter(_ContextDefaults())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
