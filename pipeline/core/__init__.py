"""Pure domain core: events, budgets, prompts, views, hashing, decisions, runs, replay verification.

Also scoring, domain rules and the in-memory log.

Imports nothing outside the standard library, orjson, rapidfuzz and the core itself (ruff's
banned-api for libraries, import-linter for the project's own layers).
"""

from pipeline.core.case import Case, RequiredAnchor
from pipeline.core.decision import Decision
from pipeline.core.errors import DpmError
from pipeline.core.event_log import EventLog, RawRecord, ReadResult
from pipeline.core.events import CaseRef, Event, InvalidEventError, LogPosition, Trajectory
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.model import ModelBackend, ModelBackendError, ModelRequest, ModelResponse, Purpose, Usage
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall, RunResult, SummMemory, SummVariant, finish_summ, run_dpm, run_summ, summ_step
from pipeline.core.task import Architecture, Budget, InvalidTaskError, TaskSpec, parse_architectures, resolve_budget
from pipeline.core.verification import ReplayReport, ReplayStatus, ReplayTarget, verify_recorded, verify_replay
from pipeline.core.view import Fact, MemoryView

__all__ = [
    "Architecture",
    "Budget",
    "Case",
    "CaseRef",
    "Decision",
    "DpmError",
    "Event",
    "EventLog",
    "Fact",
    "InMemoryEventLog",
    "InvalidEventError",
    "InvalidTaskError",
    "LogPosition",
    "MemoryView",
    "ModelBackend",
    "ModelBackendError",
    "ModelCall",
    "ModelRequest",
    "ModelResponse",
    "Purpose",
    "RawRecord",
    "ReadResult",
    "RecordedAnswers",
    "ReplayReport",
    "ReplayStatus",
    "ReplayTarget",
    "RequiredAnchor",
    "RunResult",
    "SummMemory",
    "SummVariant",
    "TaskSpec",
    "Trajectory",
    "Usage",
    "finish_summ",
    "parse_architectures",
    "resolve_budget",
    "run_dpm",
    "run_summ",
    "summ_step",
    "verify_recorded",
    "verify_replay",
]
