"""Pure domain core: no Kafka, faust, HTTP or metrics imports (enforced by ruff banned-api)."""
