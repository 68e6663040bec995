"""The README's main job, then `dpm compare` and `dpm replay` on what it published."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def _dpm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True,
                          env={**os.environ, **env, "COLUMNS": "200"}, timeout=600, check=False)  # fmt: skip


def test_demo_runs_end_to_end_and_its_decisions_replay(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_HOME": str(tmp_path / "home")}
    demo = _dpm("demo", "--per-domain", "1", "--workdir", str(tmp_path / "demo"), env=env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "replay: 6/6 MATCH" in demo.stdout  # 3 decisions of each architecture
    assert "dead letters: 0" in demo.stdout
    assert "duplicate decision ids: 0" in demo.stdout
    prefix = re.search(r"topics: (demo-\d+)\.\*", demo.stdout)
    assert prefix, demo.stdout
    env["DPM_TOPIC_PREFIX"] = prefix.group(1)
    compared = _dpm("compare", env=env)
    assert compared.returncode == 0, compared.stderr
    assert "on 4 trigger(s) decided by both" in compared.stdout
    assert "agreement:" in compared.stdout
    for flags in (("--all",), ("--all", "--verify-recorded")):
        replayed = _dpm("replay", *flags, env=env)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert replayed.stdout.count("MATCH") == 8
    missing = _dpm("replay", "--decision", "no-such-decision", env=env)
    assert missing.returncode == 1
    assert "no published decision matches" in missing.stderr
