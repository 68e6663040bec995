"""The doors' reading of an append's expected seq: If-Match over HTTP, expected_seq in MCP and the client."""

from __future__ import annotations

import pytest

from pipeline.wire import door_checks
from pipeline.wire.door_checks import MAX_SEQ, RefusedArgumentError


@pytest.mark.parametrize(("header", "seq"), [(None, None), ('"0"', 0), ('"17"', 17), (' "3" ', 3),
                                             (f'"{MAX_SEQ}"', MAX_SEQ)])  # fmt: skip
def test_if_match_names_the_case_s_last_seq_as_one_strong_entity_tag(header: str | None, seq: int | None) -> None:
    assert door_checks.if_match_seq(header) == seq


@pytest.mark.parametrize("header", ["", "5", 'W/"5"', "*", '"5", "6"', '"-1"', '""', '"1e3"', '"\u00b2"', '"\u0661"',
                                    f'"{MAX_SEQ + 1}"'])  # fmt: skip
def test_anything_else_is_refused_naming_the_header_never_the_value(header: str) -> None:
    with pytest.raises(RefusedArgumentError) as refused:
        door_checks.if_match_seq(header)
    assert refused.value.field == "If-Match"
    assert header.strip() not in str(refused.value) or header.strip() in ("", "*")


@pytest.mark.parametrize("value", [-1, MAX_SEQ + 1, True])
def test_an_expected_seq_out_of_a_seq_s_range_is_refused(value: int) -> None:
    with pytest.raises(RefusedArgumentError, match="expected_seq"):
        door_checks.expected_seq(value)
