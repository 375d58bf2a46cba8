"""bench/report.py without a bench run: RESULTS.md rendered again from the stored
bench/results.json (the latest run's), and what a run keeps of the hand-written notes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import write_reports

ROOT = Path(__file__).resolve().parents[2]


def stored_results() -> dict[str, Any]:
    """The latest run's results as the bench hands them to write_reports (no rows yet)."""
    results: dict[str, Any] = json.loads((ROOT / "bench" / "results.json").read_text())
    results.pop("rows", None)
    return results


def test_a_run_keeps_every_hand_written_section_of_results_md(tmp_path: Path) -> None:
    notes = (
        "## What changed in the latest run: a note\n\nWhy it moved.\n\n"
        "## What dominates now\n\nThe claim.\n"
    )
    (tmp_path / "RESULTS.md").write_text("# Sluice benchmark results\n\nOld table.\n\n" + notes)
    md, _ = write_reports(stored_results(), tmp_path)
    text = md.read_text()
    assert text.endswith("\n" + notes)
    assert "Old table." not in text
