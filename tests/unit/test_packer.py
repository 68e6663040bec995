"""The extractive backend's packer keeps the view's length as lines come: always the rendered text's length."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.view import Fact
from pipeline.llm.extractive.compose import _Packer

_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
_ITEM = st.one_of(
    st.tuples(st.just("facts"), st.builds(Fact, _TEXT, st.lists(st.integers(1, 99), max_size=3).map(tuple))),
    st.tuples(st.sampled_from(["reasoning", "compliance"]), _TEXT),  # headers, blanks, trailing spaces included
)


@settings(max_examples=300)
@given(st.integers(40, 600), st.lists(_ITEM, max_size=40))
def test_the_kept_length_is_the_rendered_length_and_the_budget_holds(
    budget: int, items: list[tuple[str, object]]
) -> None:
    packer = _Packer(budget)
    for section, item in items:
        packer.add(getattr(packer, section), item)  # type: ignore[arg-type]
        assert packer.char_length() == packer.view().char_length
    assert packer.view().char_length <= budget or not any(
        (packer.facts.items, packer.reasoning.items, packer.compliance.items)
    )
