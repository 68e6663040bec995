"""Reading the log: a case's events by offset, whole topics to their end, following a topic, the workers' replies."""
