"""The Summ-only baseline as its own consumer group (faust-streaming): app, typed state, wiring."""

from pipeline.workers.baseline.app import Baseline, BaselineOptions
from pipeline.workers.baseline.connection import faust_connection
from pipeline.workers.baseline.service import BaselineChoices, build_baseline, serve_baseline
from pipeline.workers.baseline.state import CaseState, SummStep

__all__ = [
    "Baseline",
    "BaselineChoices",
    "BaselineOptions",
    "CaseState",
    "SummStep",
    "build_baseline",
    "faust_connection",
    "serve_baseline",
]
