"""Evaluation harness: case generation, scoring, statistics, studies and reports."""
