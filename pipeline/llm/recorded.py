"""The `recorded` backend: a decision's recorded answers (see pipeline.core.recorded), no model at all."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.config.settings import ModelSettings
from pipeline.core.recorded import RecordedAnswers
from pipeline.core.run import ModelCall


def from_settings(settings: ModelSettings, recorded: Sequence[ModelCall]) -> RecordedAnswers:
    """Answers from `recorded`; the settings name no model to reach."""
    del settings
    return RecordedAnswers(recorded)
