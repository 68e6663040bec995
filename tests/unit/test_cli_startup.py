"""What `dpm` costs before it does anything: no heavy module at start-up; help a person can read."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.errors import DpmError

HEAVY = ("anthropic", "openai", "scipy", "matplotlib", "faust", "xllamacpp", "numpy")


def test_importing_the_cli_loads_no_model_sdk_scipy_matplotlib_or_faust() -> None:
    probe = f"import sys, pipeline.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == ""


def test_flags_show_as_flags_and_options_show_their_value() -> None:
    result = CliRunner().invoke(app, ["replay", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip().startswith("--")}
    assert lines["--all"].split()[1] == "Every"  # the help text follows the flag directly
    assert lines["--decision"].split()[1] == "<str>"


def test_a_bare_replay_says_what_to_choose_before_it_reaches_for_a_broker() -> None:
    result = CliRunner().invoke(app, ["replay"], env={"DPM_BOOTSTRAP": "127.0.0.1:1"})  # no broker there
    assert isinstance(result.exception, DpmError)  # main() prints it as one line, exit 1
    assert str(result.exception) == "say which decisions to replay: --decision ID, --tenant T [--case C], or --all"
