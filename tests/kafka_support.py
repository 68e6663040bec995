"""Test helpers for the real-broker tiers: unique topics."""

from __future__ import annotations

import uuid


def unique_prefix(label: str = "t") -> str:
    """A topic prefix no other test uses, so tests never see each other's records."""
    return f"{label}-{uuid.uuid4().hex[:10]}"
