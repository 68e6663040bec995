"""The runner of documentation pages: state carries over between blocks, outputs are checked, a broken
page fails at the block that breaks, and a skipped block says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_runner import ShellSession, expect_lines, run_page
from tests.e2e.test_docs_run import reader_env

FENCE = "```"


def _page(tmp_path: Path, body: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(body.replace("'''", FENCE))
    return page


def _run(tmp_path: Path, body: str) -> ShellSession:
    session = ShellSession(tmp_path / "blocks", reader_env(tmp_path / "home"))
    try:
        return run_page(_page(tmp_path, body), session)
    finally:
        session.close()


def test_exports_and_the_folder_carry_over_and_a_promised_output_is_checked(tmp_path: Path) -> None:
    session = _run(
        tmp_path,
        """# A page
'''bash
export GREETING=hello
mkdir -p ~/work && cd ~/work
'''

'''bash
echo "$GREETING from $(pwd)"; echo "decided 3 case(s)"
'''

'''text title="output"
hello from .../work
decided ... case(s)
'''

<!-- skip: next "needs a hosted model" -->

'''bash
exit 1
'''
""",
    )
    assert [r.status for r in session.ran] == [0, 0]
    assert len(session.skipped) == 1
    assert "needs a hosted model" in session.skipped[0]


def test_a_failing_command_fails_the_page_there_and_shows_its_output(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)block 0 exited 3.*--- its output ---\nbefore"):
        _run(tmp_path, "'''bash\necho before\n(exit 3)\necho after\n'''\n\n'''bash\necho never\n'''\n")


def test_a_promise_the_output_does_not_keep_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="promises a line 'MATCH'"):
        _run(tmp_path, "'''bash\necho DRIFT\n'''\n\n'''text title=\"output\"\nMATCH\n'''\n")


def test_expected_lines_match_in_order_with_ellipses() -> None:
    expect_lines("a ... c\nlast", "x\na b c\nlast line")
    with pytest.raises(AssertionError):
        expect_lines("second\nfirst", "first\nsecond")
