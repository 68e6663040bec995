"""Test cases loaded from tests/fixtures, and a backend that keeps what it was asked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson

from pipeline.core.case import Case
from pipeline.core.events import Trajectory
from pipeline.core.model import ModelRequest, ModelResponse
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.case_files import case_from_dict

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_fixture(name: str = "loan_small.json") -> Case:
    return case_from_dict(orjson.loads((FIXTURES / name).read_bytes()))


def shortened(case: Case, events: int) -> Case:
    """The case cut to its first `events` events (the label is kept: for plumbing, not for scoring)."""
    return replace(case, trajectory=Trajectory(case.ref, case.trajectory.events[:events]))


class CountingBackend(ExtractiveBackend):
    """The offline backend, keeping every request it was asked, in order."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return super().complete(request)
