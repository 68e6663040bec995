"""Long-running processes: the stateless projection worker and the Summ-only baseline."""
