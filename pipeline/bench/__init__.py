"""Evaluation harness: case generation, scoring, statistics, studies and reports.

Submodules are the public API; they are not imported here, so SciPy and Matplotlib load only where used.
"""

__all__ = ["analysis", "determinism", "dossier", "draft", "evaluate", "filler", "generate", "harness", "letters",
           "notes", "report", "scenarios", "stats", "tams"]  # fmt: skip
