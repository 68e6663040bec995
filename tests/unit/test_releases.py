"""Releases: each one in releases.json is a commit of this repository, in the changelog, its schemas locked."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
from packaging.version import Version

from pipeline.wire.evolution import MANIFEST, canonical_digest

ROOT = Path(__file__).parents[2]
RELEASES: list[dict[str, Any]] = orjson.loads((ROOT / "releases.json").read_bytes())["releases"]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


needs_git = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                               reason="a git checkout of the repository")  # fmt: skip


def test_versions_rise_and_the_current_one_is_past_the_last_release() -> None:
    versions = [Version(r["version"]) for r in RELEASES]
    assert versions == sorted(versions)
    current = Version(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])
    assert current > versions[-1]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for release in RELEASES:
        assert f"## {release['version']} ({release['date']})" in changelog


@needs_git
def test_each_release_is_a_commit_of_main_with_its_version_and_its_schemas_locked() -> None:
    released = orjson.loads((ROOT / "schemas" / MANIFEST).read_bytes())["released"]
    for release in RELEASES:
        commit = release["commit"]
        assert _git("merge-base", "--is-ancestor", commit, "HEAD") == ""  # raises unless it is in HEAD's history
        pyproject = tomllib.loads(_git("show", f"{commit}:pyproject.toml"))
        assert pyproject["project"]["version"] == release["version"]
        for name in _git("ls-tree", "--name-only", f"{commit}:schemas").split():
            if name.endswith(".json") and name != MANIFEST:
                shipped = orjson.loads(_git("show", f"{commit}:schemas/{name}"))
                assert released.get(name) == canonical_digest(shipped), f"{name} of {release['version']} is not locked"
