"""Model backends behind the core's ModelBackend port, chosen by name from one registry.

Backend modules (`extractive`, `anthropic_backend`, `recorded`) are public too; they are not
imported here so that a model SDK loads only in a process that uses it.
"""

from pipeline.llm.registry import BACKENDS, BackendFactory, backend_names, factory, make_backend

__all__ = ["BACKENDS", "BackendFactory", "backend_names", "factory", "make_backend"]
