"""The offline, byte-deterministic backend: extraction, ranking and rule tables instead of a model."""
