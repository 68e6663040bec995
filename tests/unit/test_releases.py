"""Releases: each one in releases.json is a commit of this repository, in the changelog, its schemas locked."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tomllib
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from packaging.version import Version

from pipeline.core.events import CaseRef
from pipeline.wire.evolution import MANIFEST, canonical_digest
from pipeline.wire.key import KeyErased

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


_READS_THE_MARKER = """
import sys, orjson
from pipeline.core.events import CaseRef
from pipeline.kafka.keystore import KafkaKeyTopic  # the module path of release 0.1.0, which runs this
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
ring, case = KeyRing(LocalFileKeyProvider(sys.argv[1])), CaseRef("acme", "gone")
topic = KafkaKeyTopic({"bootstrap.servers": "127.0.0.1:9"}, "dpm.keys")  # never connects: records are applied
topic._apply(ring, b"acme/gone", None)
topic._apply(ring, b"acme/gone", sys.argv[2].encode())
print(ring.erased(case), ring.knows(case))
"""


@needs_git
def test_the_previous_release_reads_an_erasure_s_tombstone_and_skips_its_marker_with_a_warning(tmp_path: Path) -> None:
    """An erasure is a tombstone and then an erased marker (dpm.key_erased.v1), which the last release does not know."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", RELEASES[-1]["commit"],
                              "pipeline", "schemas"], capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    marker = KeyErased(CaseRef("acme", "gone"), 1_800_000_000_000).encode().decode()
    ran = subprocess.run([sys.executable, "-c", _READS_THE_MARKER, str(tmp_path / "keks"), marker],
                         capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "src")},
                         timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["True", "False"]  # erased by the tombstone, the marker changing nothing
    assert "skipped" in ran.stderr  # the marker: logged, not applied
