"""Metrics (Prometheus) and structured JSON logs for the long-running processes."""
