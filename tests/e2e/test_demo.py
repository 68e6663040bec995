"""The README's main job, then `dpm compare` and `dpm replay` on what it published."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker


def test_demo_runs_end_to_end_and_its_decisions_replay_with_the_commands_it_prints(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_HOME": str(tmp_path / "home")}
    demo = dpm_cli("demo", "--per-domain", "1", "--workdir", str(tmp_path / "demo"), "--keep", env=env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "replay: 6/6 MATCH" in demo.stdout  # 3 decisions of each architecture
    assert "dead letters: 0" in demo.stdout
    assert "duplicate decision ids: 0" in demo.stdout
    assert "model calls of DPM" in demo.stdout  # the takeaway line
    assert demo.stdout.index("replay of 6 decision(s)") < demo.stdout.index("DPM_TOPIC_PREFIX=")  # in order
    printed = re.findall(r"^  DPM_TOPIC_PREFIX=(\S+) dpm (.+)$", demo.stdout, re.MULTILINE)
    assert [command.split()[:2] for _, command in printed] == [["replay", "--decision"], ["replay", "--all"],
                                                                ["compare"]], demo.stdout  # fmt: skip
    decision = printed[0][1].split()[-1]
    assert demo.stdout.count(decision) >= 2, "piped tables keep whole ids"  # in the replay table and the command
    for prefix, command in printed:  # exactly as printed
        ran = dpm_cli(*command.split(), env={**env, "DPM_TOPIC_PREFIX": prefix})
        assert ran.returncode == 0, ran.stdout + ran.stderr
    env["DPM_TOPIC_PREFIX"] = printed[0][0]
    compared = dpm_cli("compare", env=env)
    assert compared.returncode == 0, compared.stderr
    assert "on 4 trigger(s) decided by both" in compared.stdout
    assert "agreement:" in compared.stdout
    for flags in (("--all",), ("--all", "--verify-recorded")):
        replayed = dpm_cli("replay", *flags, env=env)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert replayed.stdout.count("MATCH") == 8
    missing = dpm_cli("replay", "--decision", "no-such-trigger:dpm", env=env)
    assert missing.returncode == 1
    assert "no published decision matches" in missing.stderr
    malformed = dpm_cli("replay", "--decision", "no-such-decision", env=env)
    assert malformed.returncode == 1
    assert "is not <trigger id>:<architecture>" in malformed.stderr
