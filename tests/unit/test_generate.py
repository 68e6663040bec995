"""Case generation: seeded and deterministic, by inversion, realistic difficulty, schema-valid."""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.bench.generate import DOMAINS, GenerationError, GenerationSpec, Voice, generate_case, generate_cases
from pipeline.core.anchors import contains_verbatim
from pipeline.core.domains import rules_for
from pipeline.core.fields import extract_fields
from pipeline.wire.case_files import case_to_dict
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import validate
from tests.processes import run_python

CASES = generate_cases(GenerationSpec(per_domain=4))


def test_default_cases_have_82_to_96_events_and_26k_to_28k_characters() -> None:
    assert {c.domain for c in CASES} == set(DOMAINS) == {"loan", "claim", "prior_auth", "tax_exam"}
    for case in CASES:
        assert 82 <= len(case.trajectory) <= 96
        assert 26_000 <= case.trajectory.char_length <= 28_200
        validate(SchemaId.CASE, case_to_dict(case))


def test_labels_are_balanced_and_implied_by_the_final_values() -> None:
    for domain in DOMAINS:
        labels = Counter(c.label for c in CASES if c.domain == domain)
        assert len(labels) == min(4, len(rules_for(domain).label_space))  # type: ignore[union-attr]
    for case in CASES:
        rules = rules_for(case.domain)
        assert rules is not None
        values = extract_fields(rules.fields, [(i, e.text) for i, e in enumerate(case.trajectory.events, start=1)])
        assert rules.policy(values).label == case.label, case.ref


def test_every_required_anchor_is_derivable_verbatim() -> None:
    for case in CASES:
        for anchor in case.required_anchors:
            assert any(anchor.value in e.text for e in case.trajectory.events), (case.ref, anchor)


def test_files_carry_decoys_and_amendments() -> None:
    texts = [e.text for c in CASES for e in c.trajectory.events]
    assert any("minimum" in t or "typical" in t for t in texts)
    amended = [c for c in CASES if any(e.kind == "amendment" for e in c.trajectory.events)]
    assert len(amended) >= len(CASES) // 4
    for case in amended:
        corrected = [e for e in case.trajectory.events if e.kind == "amendment"]
        assert any(contains_verbatim(e.text, a.value) for e in corrected for a in case.required_anchors)


def test_adversarial_cases_plant_injections() -> None:
    hostile = generate_case(GenerationSpec(adversarial=True), "loan", 0)
    markers = ("ignore all previous instructions", "automated reviewer", "</events>", "ai assistant")
    assert any(m in e.text.lower() for e in hostile.trajectory.events for m in markers)


HARD = generate_cases(GenerationSpec(per_domain=3, hard=True))


def test_hard_cases_amend_twice_place_decisive_facts_late_and_carry_more_decoys() -> None:
    for easy, hard in zip(CASES, generate_cases(GenerationSpec(per_domain=4, hard=True)), strict=True):
        assert sum(e.kind == "guidance" for e in hard.trajectory.events) >= 2 + sum(
            e.kind == "guidance" for e in easy.trajectory.events
        )
    for case in HARD:
        core = [e for e in case.trajectory.events if e.kind in ("document", "amendment", "guidance")]
        assert sum(e.kind == "amendment" for e in core) >= 2
        assert min(e.seq for e in core) > 0.35 * len(case.trajectory)
        rules = rules_for(case.domain)
        assert rules is not None
        values = extract_fields(rules.fields, [(e.seq, e.text) for e in case.trajectory.events])
        assert rules.policy(values).label == case.label, case.ref


DOSSIERS = generate_cases(GenerationSpec(per_domain=6, voice=Voice.DOSSIER))


def test_dossier_cases_are_schema_valid_balanced_and_written_in_another_voice() -> None:
    forms_sentences = {e.text for c in CASES for e in c.trajectory.events if e.kind == "document"}
    for case in DOSSIERS:
        validate(SchemaId.CASE, case_to_dict(case))
        assert case.ref.case_id.startswith(f"dossier-{case.domain}-")
        assert 82 <= len(case.trajectory) <= 96
        assert not forms_sentences & {e.text for e in case.trajectory.events}
        for anchor in case.required_anchors:
            assert any(anchor.value in e.text for e in case.trajectory.events), (case.ref, anchor)
    loans = Counter(c.label for c in DOSSIERS if c.domain == "loan")
    assert loans == {"APPROVE": 2, "DENY": 2, "REFER": 2}
    assert any("|---|" in e.text for c in DOSSIERS for e in c.trajectory.events)  # tables
    assert any(" AI " in e.text or "automated" in e.text for c in DOSSIERS for e in c.trajectory.events)


def test_dossier_tasks_state_thresholds_near_the_cases_figures() -> None:
    stated = [c for c in DOSSIERS if c.domain in ("loan", "prior_auth", "tax_exam")]
    assert all(any(ch.isdigit() for ch in c.task.task) for c in stated)
    assert {c.task.task for c in stated if c.domain == "loan"} - {rules_for("loan").task}  # type: ignore[union-attr]


def test_a_referred_dossier_lacks_a_decisive_document() -> None:
    for case in (c for c in DOSSIERS if c.label == "REFER"):
        text = " ".join(e.text for e in case.trajectory.events)
        assert "No scores have been returned" in text or "report is still outstanding" in text


def test_long_trajectories_up_to_a_million_characters() -> None:
    spec = GenerationSpec(domains=("claim",), per_domain=1, events=(3300, 3304), chars=(1_000_000, 1_020_000))
    case = generate_cases(spec)[0]
    assert 1_000_000 <= case.trajectory.char_length <= 1_030_000


def test_unknown_domains_are_a_clear_error() -> None:
    with pytest.raises(GenerationError, match="no generator for domain 'hiring'"):
        generate_case(GenerationSpec(), "hiring", 0)


def test_the_same_seed_gives_the_same_bytes_in_another_process() -> None:
    script = (
        "import orjson; from pipeline.bench.generate import *; from pipeline.wire.case_files import case_to_dict;"
        "import hashlib; print(hashlib.sha256(orjson.dumps([case_to_dict(c) for voice in Voice for c in "
        "generate_cases(GenerationSpec(per_domain=2, seed=7, voice=voice, hard=True))])).hexdigest())"
    )

    digests = {run_python(script, "1"), run_python(script, "99")}
    assert len(digests) == 1
    seven = [case_to_dict(c) for c in generate_cases(GenerationSpec(per_domain=2, seed=7, hard=True))]
    eight = [case_to_dict(c) for c in generate_cases(GenerationSpec(per_domain=2, seed=8, hard=True))]
    assert seven != eight


def test_notes_cases_are_a_shorthand_log_with_pending_files() -> None:
    notes = generate_cases(GenerationSpec(per_domain=3, voice=Voice.NOTES))
    for case in notes:
        validate(SchemaId.CASE, case_to_dict(case))
        assert case.ref.case_id.startswith(f"notes-{case.domain}-")
        assert 26_000 <= case.trajectory.char_length <= 28_200
        for anchor in case.required_anchors:
            assert any(anchor.value in e.text for e in case.trajectory.events), (case.ref, anchor)
    loans = [c for c in notes if c.domain == "loan"]
    assert [c.label for c in loans] == ["APPROVE", "DENY", "PEND"]
    assert all(">=" in c.task.task for c in loans)
    pending = " ".join(e.text for e in loans[2].trajectory.events)
    assert "appraisal not back yet" in pending


def test_letters_cases_state_their_figures_in_sentences() -> None:
    letters = generate_cases(GenerationSpec(per_domain=2, voice=Voice.LETTERS))
    for case in letters:
        validate(SchemaId.CASE, case_to_dict(case))
        assert case.ref.case_id.startswith(f"letters-{case.domain}-")
        assert any(e.text.startswith("MEMORANDUM") for e in case.trajectory.events)
        for anchor in case.required_anchors:
            assert any(anchor.value in e.text for e in case.trajectory.events), (case.ref, anchor)
