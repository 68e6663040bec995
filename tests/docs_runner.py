"""Runs a documentation page as a reader would: its shell blocks in order, in one shell, and checks its outputs.

Sybil parses the page (fenced blocks, skip directives); it evaluates Python out of the box, not shell,
and pytest-markdown-docs runs Python only, so the evaluator of `bash` blocks is ours: one `bash`
process per page, fed block after block, so that `export`, `cd` and background jobs carry over as
they do in a reader's terminal. A block that fails ends the page (the shell runs with `set -e`).

What a page promises is written on the page, in a block titled `output` right after the command:

    ```text title="output"
    MATCH ... dpm
    ```

Each of its lines must appear in the previous block's output, in order; `...` stands for anything
within a line. A block the page cannot run here is preceded by `<!-- skip: next "why" -->`.

A `python` block is a sample a reader runs as a script, in the same shell (its virtual environment, its
exports, its folder): run at once with `python3`, or, titled with a file name (```` ```python
title="agent.py" ````), saved as that file in the shell's folder for a later `bash` block to run, as a
reader who saves the sample would.

A page stops what it starts: a local broker or model server still running when the page ends is
reported by `left_running` (the session's `close` stops it either way).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import SkipTest

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from pipeline.kafka.local import local_broker
from pipeline.llm import local_model

REPO = Path(__file__).resolve().parents[1]
BLOCK_TIMEOUT_S = 900.0
_OUTPUT_INFO = re.compile(r'text title="output"$\n', re.MULTILINE)
_PYTHON_INFO = re.compile(r'python(?: title="(?P<title>[\w.-]+\.py)")?$\n', re.MULTILINE)
_HEREDOC_END = "DPM_DOCS_SAMPLE_END"  # a quoted heredoc: the sample reaches python or its file byte for byte


@dataclass
class Ran:
    """One block as it ran: its text, its status and what it printed (stdout and stderr together)."""

    source: str
    status: int | None
    output: str
    seconds: float


@dataclass
class ShellSession:
    """One `bash` that runs a page's blocks in order, with the reader's environment."""

    folder: Path
    env: dict[str, str]
    ran: list[Ran] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _shell: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._shell = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, cwd=REPO,
                                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)  # fmt: skip

    def run(self, source: str, timeout_s: float = BLOCK_TIMEOUT_S) -> Ran:
        """Runs one block; the shell ends (and the page with it) when a command of it fails."""
        shell = self._shell
        if shell is None or shell.poll() is not None:
            raise AssertionError("the shell ended at an earlier block: the page cannot be followed past it")
        n = len(self.ran)
        block, out, status = (self.folder / f"block-{n}{suffix}" for suffix in (".sh", ".out", ".status"))
        block.write_text(source)
        done = f'echo $? > "{status}.tmp"; mv "{status}.tmp" "{status}"'  # the status file appears whole
        line = f'{{ set -e; . "{block}"; }} > "{out}" 2>&1 < /dev/null; {done}\n'
        assert shell.stdin is not None
        shell.stdin.write(line.encode())
        shell.stdin.flush()
        started = time.monotonic()
        while not status.exists() and shell.poll() is None:
            if time.monotonic() - started > timeout_s:
                self.close()
                raise AssertionError(f"block {n} ran longer than {timeout_s:g} s:\n{source}")
            time.sleep(0.2)
        code = int(status.read_text()) if status.exists() else shell.returncode
        ran = Ran(source, code, out.read_text(errors="replace") if out.exists() else "", time.monotonic() - started)
        self.ran.append(ran)
        if code != 0:
            raise AssertionError(f"block {n} exited {code}:\n{source}\n--- its output ---\n{ran.output[-6000:]}")
        return ran

    def left_running(self) -> list[str]:
        """The local brokers and model servers the page started and did not stop (each DPM_HOME is under HOME)."""
        left = []
        for state in Path(self.env["HOME"]).rglob("running.json"):
            home, kind = state.parents[1], state.parent.name
            running = local_broker.read_running(home) if kind == "broker" else local_model.read_running(home)
            if running is not None:
                left.append(f"a {kind} under {home}")
        return left

    def close(self) -> None:
        """Stops the shell and whatever it left running: its jobs, and local brokers and model servers."""
        if self._shell is not None and self._shell.poll() is None:
            assert self._shell.stdin is not None
            self._shell.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._shell.wait(5)
        if self._shell is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._shell.pid, signal.SIGTERM)  # background jobs a page forgot to stop
        dpm = str(REPO / ".venv" / "bin" / "dpm")
        for state in Path(self.env["HOME"]).rglob("running.json"):  # each DPM_HOME the page used is under its HOME
            env = {**self.env, "DPM_HOME": str(state.parents[1])}
            for command in (["broker", "down"], ["model", "down"]):
                subprocess.run([dpm, *command], env=env, capture_output=True, timeout=120, check=False)


def expect_lines(expected: str, output: str) -> None:
    """Each non-blank expected line matches a line of `output`, in order; `...` matches anything within a line."""
    lines = output.splitlines()
    at = 0
    for wanted in (w.strip() for w in expected.splitlines() if w.strip()):
        pattern = re.compile(".*".join(re.escape(part.strip()) for part in wanted.split("...")))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            raise AssertionError(f"the page promises a line {wanted!r}, not in the output:\n{output[-6000:]}")
        at += 1


def _session(example: Example) -> ShellSession:
    session: ShellSession = example.namespace["shell"]
    return session


def _run_block(example: Example) -> None:
    _session(example).run(str(example.parsed))


def _check_output(example: Example) -> None:
    session = _session(example)
    if not session.ran:
        raise AssertionError("an output block comes before any command")
    expect_lines(str(example.parsed), session.ran[-1].output)


class _OutputBlocks:
    """Regions for ```text title="output"``` blocks, checked against the previous block's output."""

    _lexer = RawFencedCodeBlockLexer(info_pattern=_OUTPUT_INFO, mapping={"source": "source"})

    def __call__(self, document: Document) -> Iterator[Region]:
        for region in self._lexer(document):
            region.parsed = region.lexemes["source"]
            region.evaluator = _check_output
            yield region


def _python_sample(source: str, title: str | None) -> str:
    """The shell lines that run a python block as a script, or save it as the file its title names."""
    target = f"cat > {title}" if title else "python3 -"
    return f"{target} <<'{_HEREDOC_END}'\n{source}{_HEREDOC_END}\n"


class _PythonBlocks:
    """Regions for ```python``` blocks: samples run as scripts in the page's shell, or saved as a titled file."""

    _lexer = RawFencedCodeBlockLexer(info_pattern=_PYTHON_INFO, mapping={"source": "source", "title": "title"})

    def __call__(self, document: Document) -> Iterator[Region]:
        for region in self._lexer(document):
            region.parsed = _python_sample(str(region.lexemes["source"]), region.lexemes.get("title"))
            region.evaluator = _run_block
            yield region


def page_parser() -> Sybil:
    """Parses a page's bash and python blocks, its `output` blocks and its skip directives."""
    return Sybil(parsers=[CodeBlockParser(language="bash", evaluator=_run_block), _PythonBlocks(), _OutputBlocks(),
                          SkipParser()])  # fmt: skip


def run_page(page: Path, session: ShellSession) -> ShellSession:
    """Every example of the page in order, in `session`; skipped ones are recorded with their reason."""
    document = page_parser().parse(page)
    document.namespace["shell"] = session
    session.start()
    for example in document.examples():
        try:
            example.evaluate()
        except SkipTest as skipped:
            session.skipped.append(f"line {example.line}: {skipped}")
    return session
