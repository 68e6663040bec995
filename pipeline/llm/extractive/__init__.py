"""The offline, byte-deterministic backend: extraction, ranking and rule tables instead of a model."""

from pipeline.llm.extractive.backend import MODEL_ID, ExtractiveBackend, from_settings

__all__ = ["MODEL_ID", "ExtractiveBackend", "from_settings"]
