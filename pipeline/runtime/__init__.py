"""Helpers for the local processes the project starts itself (a broker, a model server): liveness, shutdown."""

from pipeline.runtime.processes import process_alive, terminate

__all__ = ["process_alive", "terminate"]
