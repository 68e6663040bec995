"""The runner of documentation pages: state carries over between blocks, outputs are checked, a broken
page fails at the block that breaks, and a skipped block says why."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import orjson
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


def test_a_python_sample_runs_as_a_script_in_the_page_s_shell_and_a_titled_one_is_saved_for_a_later_block(
    tmp_path: Path,
) -> None:
    session = _run(
        tmp_path,
        """# A page
'''bash
export GREETING=hello
mkdir -p ~/work && cd ~/work
'''

'''python
import os
print(os.environ["GREETING"], "from", os.getcwd())
'''

'''text title="output"
hello from .../work
'''

'''python title="agent.py"
print("the saved sample: $GREETING stays as written")
'''

'''bash
python3 agent.py
'''

'''text title="output"
the saved sample: $GREETING stays as written
'''
""",
    )
    assert [r.status for r in session.ran] == [0, 0, 0, 0]


def test_a_python_sample_that_fails_fails_the_page(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)block 0 exited 1.*SyntaxError"):
        _run(tmp_path, "'''python\nasync with open('x') as f:\n    pass\n'''\n")


def test_a_local_broker_the_page_did_not_stop_is_reported(tmp_path: Path) -> None:
    session = ShellSession(tmp_path / "blocks", reader_env(tmp_path / "home"))
    state = tmp_path / "home" / "dpm" / "broker" / "running.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(orjson.dumps({"nodes": 1, "port": 1, "bootstrap": "127.0.0.1:1", "pids": [os.getpid()],
                                    "root": str(tmp_path / "home" / "dpm" / "broker" / "kraft-1")}))  # fmt: skip
    with mock.patch("pipeline.kafka.local.local_broker.process_alive", return_value=True):  # as a live broker's pid
        assert session.left_running() == [f"a broker under {tmp_path / 'home' / 'dpm'}"]
    assert session.left_running() == []  # this process is no broker
