"""bench/report.py without a bench run: RESULTS.md and the README's table rendered again
from the stored bench/results.json (the latest run's), and what a run keeps of the
hand-written notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import (
    BENCH_DIR,
    README,
    headline_rows,
    kept_section,
    readme_table,
    readme_table_in,
    render_markdown,
    rows_for,
    stored_results,
    with_readme_table,
    write_readme_table,
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


def test_the_readme_table_is_what_report_py_renders_from_results_json() -> None:
    """A figure edited by hand in the README, or a results.json whose run did not rewrite
    it, fails here: `python -m bench.report` writes it again."""
    results = stored_results()
    assert readme_table_in(README.read_text()) == readme_table(results, rows_for(results))


def test_the_readme_shows_the_headline_rows_of_the_full_table() -> None:
    rows = rows_for(stored_results())
    headline = headline_rows(rows)
    assert [row for row in rows if row in headline] == headline  # the full table's order
    assert {row.workload for row in headline} == {
        "floor",
        *("W1", "W2", "W3", "W3API", "W3B", "W1R", "W2R", "W3R"),
        *(f"W{n}" for n in range(4, 14)),
    }
    every_line = set(RESULTS_MD.read_text().splitlines())
    for line in readme_table_in(README.read_text()).splitlines():
        if line.startswith("| floor |") or line.startswith("| W"):
            assert line in every_line  # the same cells, figures as rounded there


def test_only_the_table_between_the_markers_is_rewritten(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    around = ("# A\n\nBefore.\n\n", "\nAfter.\n")
    readme.write_text(
        around[0] + "<!-- bench:table -->\n| old | 1 |\n<!-- /bench:table -->\n" + around[1]
    )
    results = stored_results()
    write_readme_table(results, rows_for(results), readme)
    text = readme.read_text()
    assert text.startswith(around[0]) and text.endswith(around[1])
    assert readme_table_in(text) == readme_table(results, rows_for(results))
    with pytest.raises(ValueError, match="no <!-- bench:table -->"):
        with_readme_table("# A README without the markers\n", "| x |\n")


def test_a_run_elsewhere_leaves_the_readme_alone(tmp_path: Path) -> None:
    before = README.read_text()
    write_reports(stored_results(), tmp_path)
    assert README.read_text() == before
