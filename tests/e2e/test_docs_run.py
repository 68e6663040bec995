"""The README, every how-to and the getting-started page, followed literally: each block in order, in a fresh home.

A page runs as a reader on a fresh machine would run it: from the repository's root, with a HOME of its own
(so `~/...` and the default DPM_HOME are empty), none of the test session's DPM_* settings, and the virtual
environment only once the page activates it. Only the broker jars' cache is shared, so that a page does not
download them again. What each page promises is checked by its `output` blocks (tests/docs_runner.py).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from tests.docs_runner import REPO, ShellSession, run_page

pytestmark = [pytest.mark.e2e, pytest.mark.docs]

_LOG = logging.getLogger(__name__)
_LIBRDKAFKA_LINE = re.compile(r"^%\d\|\d+\.\d+\|[A-Z]+\|rdkafka#", re.MULTILINE)
_RUNNABLE_BLOCK = re.compile(r"^```(?:bash|python)\b", re.MULTILINE)
PAGES = sorted(
    [
        REPO / "README.md",  # its client snippet, run as the script it says to save
        REPO / "docs" / "getting-started.md",
        *(REPO / "docs" / "how-to").glob("*.md"),
        *(REPO / "docs" / "tutorials").glob("*.md"),
    ]
)


def reader_env(home: Path) -> dict[str, str]:
    """A fresh reader's environment: its own HOME, the system PATH without our virtual environment."""
    venv = str(REPO / ".venv" / "bin")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv)
    env = {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "TMPDIR": str(home / "tmp"),
           "DPM_CACHE_DIR": str(Settings.from_env().paths.cache_dir)}  # fmt: skip
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO / "docs").as_posix() if p.parent != REPO else p.name
                                             for p in PAGES])  # fmt: skip
def test_the_page_followed_literally_reaches_its_result(page: Path, tmp_path: Path) -> None:
    session = ShellSession(tmp_path / "blocks", reader_env(tmp_path / "home"))
    try:
        run_page(page, session)
        left = session.left_running()
    finally:
        session.close()
    assert not left, f"the page stops what it starts, but left running: {left}"
    text = page.read_text()
    blocks = len(_RUNNABLE_BLOCK.findall(text))
    assert len(session.ran) + len(session.skipped) == blocks, "every shell block and sample ran or says why not"
    if session.ran:
        assert 'title="output"' in text, "a page whose commands run states the result they reach"
    for ran in session.ran:  # a command speaks in its own words: librdkafka's raw log lines are noise to a reader
        assert not _LIBRDKAFKA_LINE.search(ran.output), f"librdkafka lines from:\n{ran.source}\n{ran.output[-3000:]}"
    for ran in session.ran:  # shown with -o log_cli=true: where a page's time goes
        _LOG.info("%7.1f s  %s", ran.seconds, ran.source.strip().splitlines()[0] if ran.source.strip() else "")
    for skipped in session.skipped:
        _LOG.info("skipped: %s", skipped)
