"""Application services the CLI calls: ingest, erase, replay, compare, demo, evaluation, the cluster session.

Submodules are the public API; they are not imported here, so a command loads only what it uses.
"""

__all__ = ["cluster", "compare", "demo", "erase", "evaluation", "evaluation_kafka", "ingest", "read_outputs", "replay"]
