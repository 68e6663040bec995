"""Runs Python snippets in fresh interpreters, to prove results do not depend on the process."""

from __future__ import annotations

import os
import subprocess
import sys


def run_python(script: str, hash_seed: str) -> str:
    """stdout of `script` in a new interpreter with the given PYTHONHASHSEED."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
