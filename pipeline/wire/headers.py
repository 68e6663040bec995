"""Record headers the pipeline writes beside the value."""

TENANT_HEADER = "dpm-tenant"
REASON_HEADER = "dpm-reason"
