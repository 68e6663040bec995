"""The benchmark's report: rendered from the figures file into its docs page, machine included."""

from __future__ import annotations

from pathlib import Path

import orjson

from benchmarks.pipeline_bench import BEGIN, END, render_page, rows

FIGURES = {
    "machine": {
        "cpus": 2,
        "cpu_model": "Test CPU",
        "memory_gb": 24.0,
        "os": "Debian GNU/Linux 12 (bookworm)",
        "python": "3.11.7",
        "kafka": "3.9.2, a private local broker",
        "confluent_kafka": "2.16.1",
        "date": "2026-11-30 14:00 UTC",
    },
    "seconds": {"scale": 60.0, "latency_ms": 40.0},
    "scale": {
        "c1_w1": 0.97,
        "c8_w1": 6.6,
        "c8_w2": 13.1,
        "c8_w4": 24.2,
        "c8_w1/c1_w1": 6.8,
        "c8_w2/c8_w1": 1.98,
        "c8_w4/c8_w1": 3.67,
    },
    "latency_ms": {"triggers": 120, "p50": 38.0, "p90": 92.0, "p99": 149.0, "first_ms": 191.0},
}


def test_the_table_is_rendered_between_its_markers_from_the_figures(tmp_path: Path) -> None:
    figures_file = tmp_path / "figures.json"
    figures_file.write_bytes(orjson.dumps(FIGURES))
    page = tmp_path / "README.md"
    page.write_text(f"# Title\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    render_page(page, figures_file)
    text = page.read_text()
    assert text.startswith("# Title\n\n")
    assert text.endswith("\n\nafter\n")
    assert "old table" not in text
    assert "on 2 cores (Test CPU), 24.0 GB, Debian GNU/Linux 12 (bookworm)" in text
    assert (
        "| decisions/s at 500 ms per model call, 1 worker, concurrency 1 / 8 | 0.97 / 6.60 (x6.80; target x6) |" in text
    )
    assert "p50 38 ms, p90 92 ms, p99 149 ms" in text


def test_sections_not_measured_are_left_out() -> None:
    assert [name for name, _ in rows({"machine": {}})] == []
    assert len(rows(FIGURES)) == 3
