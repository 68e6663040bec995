"""Model backends behind the core's ModelBackend port."""
