"""Trajectory capture where agents are built: every step an agent takes appended to its case, a decision one step.

Each integration is an optional extra (`pip install 'dpm-pipeline[langgraph]'`, `[openai-agents]`)
and imports its framework only when it is imported itself.
"""
