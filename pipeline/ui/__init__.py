"""The auditor's web pages (`dpm ui`): decisions, their cited evidence and replay, per tenant, read-only."""

from pipeline.ui.app import create_app
from pipeline.ui.auth import Principal, Tokens
from pipeline.ui.server import serve

__all__ = ["Principal", "Tokens", "create_app", "serve"]
