"""Stateless decision memory for enterprise AI agents (Deterministic Projection Memory on Kafka)."""

__version__ = "0.1.0"
