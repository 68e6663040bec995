"""The ModelBackend contract, written once and run against every backend (see test_backends.py)."""

from __future__ import annotations

from pipeline.core.model import ModelBackend, response_text
from pipeline.core.parse import parse_view
from pipeline.core.prompt import projection_request
from pipeline.core.run import run_dpm, run_summ
from pipeline.core.task import Budget
from tests.cases import load_fixture

CASE = load_fixture()
BUDGET = Budget(700)


class BackendContract:
    """Subclasses provide `backend()`; every test here must hold for each backend."""

    def backend(self) -> ModelBackend:
        raise NotImplementedError

    def test_has_a_name_and_a_model_id(self) -> None:
        backend = self.backend()
        assert backend.name
        assert backend.model

    def test_projection_answer_parses_into_three_sections(self) -> None:
        response = self.backend().complete(projection_request(CASE.trajectory, CASE.task, BUDGET))
        outcome = parse_view(response.text)
        assert outcome.ok, outcome.problems
        assert outcome.view.facts

    def test_raw_bytes_hold_the_text_in_the_backends_format(self) -> None:
        response = self.backend().complete(projection_request(CASE.trajectory, CASE.task, BUDGET))
        assert response_text(response.raw, response.format) == response.text
        assert len(response.raw_digest) == 64

    def test_usage_cost_and_latency_are_recorded(self) -> None:
        response = self.backend().complete(projection_request(CASE.trajectory, CASE.task, BUDGET))
        assert response.usage.input_tokens >= 0
        assert response.usage.output_tokens > 0
        assert response.cost_usd >= 0
        assert response.latency_s >= 0
        assert response.stop_reason

    def test_same_request_gives_the_same_text(self) -> None:
        request = projection_request(CASE.trajectory, CASE.task, BUDGET)
        backend = self.backend()
        assert backend.complete(request).text == backend.complete(request).text

    def test_full_runs_decide_within_the_label_space(self) -> None:
        for runner in (run_dpm, run_summ):
            result = runner(CASE.trajectory, CASE.task, BUDGET, self.backend())
            assert result.decision.label in CASE.task.label_space
