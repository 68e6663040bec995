"""Long-running processes: the stateless projection worker and the Summ-only baseline, each wired here.

Submodules are the public API; they are not imported here, so a projection worker never loads faust.
"""

__all__ = ["baseline", "lifecycle", "projection", "publishing"]
