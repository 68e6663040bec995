"""The docs' reference pages are generated from the code and must match it (`dpm docs reference`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import typer

from pipeline.cli import app
from pipeline.cli.reference import commands_page, dead_letters_page, metrics_page, settings_page, write_or_check
from pipeline.config.settings import ENVIRONMENT
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.rejection import MEANINGS, Rejection
from pipeline.wire.resources import schemas_dir

REFERENCE = Path(__file__).parents[2] / "docs" / "reference"


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    assert write_or_check(app, REFERENCE, check=True) == [], "run `dpm docs reference` and commit the pages"


def test_every_command_setting_metric_and_reason_has_its_entry() -> None:
    page = commands_page(app)
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        for shown in _commands(command, f"dpm {name}"):
            assert f"## `{shown}`" in page, shown
    settings = settings_page()
    assert all(f"`{variable}`" in settings for variable in ENVIRONMENT)
    metrics = metrics_page()
    assert all(family.name in metrics for family in PipelineMetrics().registry.collect())
    assert all(f"`{alert}`" in metrics for alert in ("DpmConsumerLagGrowing", "DpmReplayDrift"))
    assert set(MEANINGS) == set(Rejection)
    assert all(f"`{reason.value}`" in dead_letters_page() for reason in Rejection)


def test_every_schema_file_has_its_section() -> None:
    text = (REFERENCE / "schemas.md").read_text()
    for path in schemas_dir().glob("*.v*.json"):
        assert f"`schemas/{path.name}`" in text


def test_the_committed_diagrams_are_what_their_dot_files_draw() -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    sources = sorted((REFERENCE.parent / "diagrams").glob("*.dot"))
    assert {s.stem for s in sources} >= {"architecture", "topics", "decision", "replay"}
    for source in sources:
        drawn = subprocess.run(["dot", "-Tsvg", str(source)], capture_output=True, check=True).stdout
        assert source.with_suffix(".svg").read_bytes() == drawn, f"{source.name}: run `make docs` and commit the SVG"


def _commands(command: object, path: str) -> list[str]:
    """Every command a user can run: each leaf, and each group that does something itself (it has options)."""
    subcommands: dict[str, object] | None = getattr(command, "commands", None)
    if subcommands is None:
        return [path]
    own = [path] if any(p.name != "help" for p in getattr(command, "params", [])) else []
    return own + [shown for name, sub in subcommands.items() for shown in _commands(sub, f"{path} {name}")]
