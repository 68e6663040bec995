"""Metrics (Prometheus) and structured JSON logs for the long-running processes."""

from pipeline.observability.logs import CONTEXT_FIELDS, configure_json_logging, json_logging_config
from pipeline.observability.metrics import PipelineMetrics

__all__ = ["CONTEXT_FIELDS", "PipelineMetrics", "configure_json_logging", "json_logging_config"]
