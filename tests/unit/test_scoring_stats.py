"""Scoring axes, judges, paired statistics and the selection rule."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from scipy import stats

from pipeline.bench.stats import SignFlipTest, cohens_h, paired, sign_flip_test
from pipeline.bench.tams import Needs, select
from pipeline.core.model import ModelBackendError
from pipeline.core.scoring import KeywordJudge, eda, frp, provision_mentioned
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.judge import LlmJudge
from tests.cases import load_fixture
from tests.fake_model_apis import Fault, MessagesApiState, messages_api

CASE = load_fixture()


def test_frp_matches_by_value_and_never_inside_other_numbers() -> None:
    exact = "LN-2026-004512 $412,000 $441,000 $8,900 $4,155 688"
    assert frp(CASE, exact) == 1.0
    assert frp(CASE, "LN-2026-004512 412000.00 441000 8900 4155.00 688") == 1.0
    assert frp(CASE, "LN-2026-004512 $4,412,000 $441,0001 $8,9000 $4,155 6880") == pytest.approx(2 / 6)


def test_eda_is_exact_within_the_label_space() -> None:
    assert eda(CASE, "DENY") == 1.0
    assert eda(CASE, "deny") == 1.0
    assert eda(CASE, "APPROVE") == 0.0
    assert eda(CASE, None) == 0.0


def test_keyword_judge_scores_points_and_provisions() -> None:
    judge = KeywordJudge()
    full = "DTI 46.7% exceeds 43%. LTV 93.4% within 95%. Credit score 688 meets 620. 12 CFR 1002.9; FCRA 615(a)."
    assert judge.grade(CASE, full).rcs == 1.0
    assert judge.grade(CASE, full).crr == 1.0
    partial = judge.grade(CASE, "Credit score 688 meets 620. 12 CFR 1002.9")
    assert partial.rcs == pytest.approx(1 / 3)
    assert partial.crr == 0.5
    assert provision_mentioned("under 12 C.F.R. 1002.9", "12 CFR 1002.9")


@pytest.fixture
def api() -> Iterator[tuple[str, MessagesApiState]]:
    with messages_api() as served:
        yield served


def _judge_answer(text: str) -> bytes:
    import orjson  # noqa: PLC0415

    return orjson.dumps({"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
                         "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                         "usage": {"input_tokens": 10, "output_tokens": 5}})  # fmt: skip


def test_llm_judge_reads_json_scores_and_refuses_anything_else(api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    judge = LlmJudge(AnthropicBackend("k", "claude-haiku-4-5", base_url=url, max_retries=0))
    state.faults.append(Fault(200, _judge_answer('Scores: {"rcs": 0.75, "crr": 0.5}')))
    scores = judge.grade(CASE, "some output")
    assert (scores.rcs, scores.crr) == (0.75, 0.5)
    assert state.requests[0]["body"]["system"].startswith("You grade")
    assert "ANSWER KEY" in state.requests[0]["body"]["messages"][0]["content"]
    state.faults.append(Fault(200, _judge_answer("I think it is good")))
    with pytest.raises(ModelBackendError, match="expected JSON"):
        judge.grade(CASE, "some output")
    state.faults.append(Fault(200, _judge_answer('{"rcs": 3, "crr": 0.5}')))
    with pytest.raises(ModelBackendError, match="out of range"):
        judge.grade(CASE, "some output")


def test_paired_statistics_are_seeded_and_sensible() -> None:
    dpm = [1.0, 0.9, 1.0, 1.0, 0.8, 1.0, 1.0, 0.9, 1.0, 1.0, 1.0, 0.9]
    summ = [0.4, 0.5, 0.3, 0.6, 0.4, 0.5, 0.2, 0.4, 0.5, 0.3, 0.6, 0.4]
    result = paired(dpm, summ, seed=20260420)
    assert result == paired(dpm, summ, seed=20260420)
    assert result.delta == pytest.approx(sum(dpm) / 12 - sum(summ) / 12)
    assert result.p_value < 0.01
    assert result.ci_low < result.delta < result.ci_high
    assert result.ci_low > 0
    same = paired([0.5, 0.6, 0.7], [0.5, 0.6, 0.7], seed=1)
    assert (same.delta, same.p_value) == (0.0, 1.0)
    noisy = paired([0.5, 0.6, 0.4, 0.5], [0.6, 0.5, 0.5, 0.4], seed=3)
    assert noisy.p_value > 0.5


def test_one_differing_pair_of_ten_is_no_evidence_at_all() -> None:
    """The flipped pair is as extreme as the observed one in every flip: p = 1, even with float noise."""
    dpm = [0.9833333333333333] * 10
    summ = [0.9833333333333333] * 9 + [1.0]  # FRP of 59/60 against 60/60 on one case
    result = paired(dpm, summ, seed=1)
    assert result.delta == pytest.approx(-0.0016667, abs=1e-6)
    assert (result.p_value, result.p_method, result.permutations) == (1.0, "exact", 1024)


def test_sign_flip_test_by_hand() -> None:
    # Differences 1, 2, 3 (sum 6): of the 8 flips, |sum| >= 6 only for (+,+,+) and (-,-,-): p = 2/8.
    assert sign_flip_test([1.0, 2.0, 3.0], seed=0) == SignFlipTest(0.25, "exact", 8)
    assert sign_flip_test([0.0, 0.0], seed=0).p_value == 1.0


def test_sign_flip_test_agrees_with_scipy_where_both_are_exact() -> None:
    dpm = np.array([3, 5, 2, 8, 7, 4, 6, 9], dtype=float)
    summ = np.array([1, 4, 3, 5, 7, 1, 2, 6], dtype=float)  # integers: no rounding in either statistic
    scipy_p = stats.permutation_test((dpm, summ), lambda x, y, axis: np.mean(x - y, axis=axis),
                                     permutation_type="samples", n_resamples=10_000, alternative="two-sided",
                                     vectorized=True).pvalue  # fmt: skip
    assert sign_flip_test(dpm - summ, seed=0).p_value == pytest.approx(scipy_p)


def test_above_sixteen_pairs_a_seeded_monte_carlo_never_reports_zero() -> None:
    strong = sign_flip_test([1.0] * 40, seed=7)
    assert strong.method == "monte-carlo"
    assert strong.p_value == 1 / (strong.permutations + 1)  # the floor: never 0
    assert sign_flip_test([1.0] * 40, seed=7) == strong


def test_cohens_h_matches_its_definition() -> None:
    assert cohens_h(1.0, 0.5) == pytest.approx(1.5708, abs=1e-4)  # the DPM paper's tight EDA effect
    assert cohens_h(0.5, 0.5) == 0.0


def test_tams_rule() -> None:
    assert select(Needs(replay=True), None, None).architecture == "DPM"
    assert "tenant isolation" in select(Needs(isolation=True), 2, 30).reason
    assert select(Needs(), 20, None).architecture == "DPM"  # above the default crossover of 10
    assert select(Needs(), 20, 50).architecture == "either"  # below a measured crossover of 50
    assert select(Needs(), 60, 50).architecture == "DPM"
    assert select(Needs(), None, None).architecture == "either"
