"""bench/report.py without a bench run: RESULTS.md rendered again from the stored
bench/results.json (the latest run's), and what a run keeps of the hand-written notes."""

from __future__ import annotations

from pathlib import Path

from bench.report import (
    BENCH_DIR,
    kept_section,
    render_markdown,
    rows_for,
    stored_results,
    write_reports,
)

RESULTS_MD = BENCH_DIR / "RESULTS.md"


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
    assert text.count("## Methods\n") == 1
    write_reports(stored_results(), tmp_path)  # the generated Methods is not kept twice
    assert md.read_text() == text


def test_results_md_is_what_report_py_writes_from_results_json() -> None:
    """Its generated part (table, runs, methods) comes from results.json; an edit by hand
    there, or a change to report.py without `python -m bench.report`, fails here."""
    results = stored_results()
    written = render_markdown(results, rows_for(results), kept_section(RESULTS_MD))
    assert RESULTS_MD.read_text() == written
