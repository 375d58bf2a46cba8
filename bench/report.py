"""The results: the targets, the RESULTS.md table, results.json and the README's table.

RESULTS.md is regenerated on every run (its table, the runs behind the medians and a
constant "## Methods"); everything from its next level-2 heading ("## What changed in the
… run", "## What dominates …") on is hand-written analysis and is kept as it is.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.sizes import DELAYS_MS, latency_name

BENCH_DIR = Path(__file__).resolve().parent
README = BENCH_DIR.parent / "README.md"

METHODS = "## Methods"
"""The generated part's one level-2 heading: how the bench runs and measures, the
targets, the probe (`_methods_lines`)."""
KEEP_FROM = re.compile(rf"(?m)^## (?!{re.escape(METHODS.removeprefix('## '))}$)")
"""Where the hand-written part of RESULTS.md begins: its first level-2 heading other
than METHODS."""


@dataclass(frozen=True)
class Row:
    workload: str
    metric: str
    value: float | None
    reference: float | None = None
    reference_label: str = ""
    ratio: float | None = None
    target: str = ""
    passed: bool | None = None


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fig(results: dict[str, Any], workload: str, name: str) -> float | None:
    entry = results["workloads"].get(workload) or {}
    return _num((entry.get("figures") or {}).get(name))


def _delta(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _check(ok: bool, *values: float | None) -> bool | None:
    return None if any(v is None for v in values) else ok


def _against_floor(
    results: dict[str, Any], name: str, value: float | None, drain: float | None
) -> tuple[float | None, str, float | None]:
    """(reference, its label, ratio) of a throughput against the floor's drain: with
    paired drains (one just before each run), the median of the per-run ratios and of
    those drains; else the run's median against the floor's."""
    paired = _fig(results, name, "paired_ratio_median")
    if paired is not None:
        return _fig(results, name, "paired_floor_drain_median"), "raw Celery, paired", paired
    return drain, "raw Celery", _ratio(value, drain)


def _against_rtt(
    results: dict[str, Any], name: str, value: float | None, rtt: float | None, p95: bool
) -> tuple[float | None, str, float | None]:
    """(reference, its label, ratio) of a hop's median (or p95) against the floor's round
    trip: with paired round trips (just before each chain), the median of the per-chain
    ratios and of those round trips; else the pooled hops' against the floor's."""
    key = "paired_hop_p95_ratio_median" if p95 else "paired_hop_ratio_median"
    paired = _fig(results, name, key)
    if paired is not None:
        ref = _fig(results, name, "paired_rtt_p95_ms_median" if p95 else "paired_rtt_ms_median")
        return ref, "raw Celery, paired", paired
    return rtt, "raw Celery", _ratio(value, rtt)


def rows_for(results: dict[str, Any]) -> list[Row]:
    """One row per figure that has a target (and a few that only inform)."""
    floor = results.get("floor") or {}
    drain = _num(floor.get("drain_tasks_per_s"))
    rtt, rtt95 = _num(floor.get("rtt_median_ms")), _num(floor.get("rtt_p95_ms"))
    raw = "raw Celery"
    rows: list[Row] = []
    ran = results["workloads"]

    if floor:
        rows += [
            Row("floor", "drain, tasks/s", drain, target="(reference: ~1,600)"),
            Row("floor", "round trip median, ms", rtt, target="(reference: 1–1.5 ms)"),
            Row("floor", "round trip p95, ms", rtt95),
        ]
    if "W1" in ran:
        v = _fig(results, "W1", "tasks_per_s")
        ref, label, r = _against_floor(results, "W1", v, drain)
        rows.append(
            Row(
                "W1",
                "fan-out, tasks/s",
                v,
                ref,
                label,
                r,
                "≥ 0.8× raw drain",
                _check(r is not None and r >= 0.8, r),
            )
        )
    if "W2" in ran:
        rows += _hop_rows(results, "W2", "", rtt, rtt95, raw)
    if "W3" in ran:
        v = _fig(results, "W3", "tasks_per_s")
        ref, label, r = _against_floor(results, "W3", v, drain)
        rows.append(
            Row(
                "W3",
                "many runs, tasks/s",
                v,
                ref,
                label,
                r,
                "≥ 0.6× raw drain",
                _check(r is not None and r >= 0.6, r),
            )
        )
    if "W3" in ran:
        v = _fig(results, "W3", "trigger_to_end_tasks_per_s")
        if v is not None:
            rows.append(Row("W3", "many runs, trigger → last run's end, tasks/s", v))
    for name, how in (
        ("W3API", "REST API"),
        ("W3B", "REST API"),
        ("W3CLI", "`sluice dags trigger`"),
    ):
        if name in ran:
            rows += _triggered_rows(results, name, how, drain)
    rows += _rabbitmq_rows(results)
    rows += _latency_rows(results)
    if "W4" in ran:
        figures = ran["W4"].get("figures") or {}
        sizes = sorted(int(k.split("_")[2]) for k in figures if k.startswith("loop_ms_"))
        for n in sizes:
            rows.append(
                Row("W4", f"tick with {n} idle DAGs, ms", _fig(results, "W4", f"loop_ms_{n}_dags"))
            )
        r = _fig(results, "W4", "ratio_largest_to_smallest")
        if sizes:
            rows.append(
                Row(
                    "W4",
                    f"tick {sizes[-1]} / tick {sizes[0]} DAGs",
                    r,
                    target="≤ 1.5×",
                    passed=_check(r is not None and r <= 1.5, r),
                )
            )
    if "W5" in ran:
        v = _fig(results, "W5", "pass_seconds")
        tasks = _fig(results, "W5", "tasks")
        rows.append(
            Row(
                "W5",
                f"one scheduling pass over {tasks or 0:.0f} TIs, s",
                v,
                target="≤ 1.5 s",
                passed=_check(v is not None and v <= 1.5, v),
            )
        )
        e2e = (ran["W5"].get("end_to_end") or {}).get("figures") or {}
        if e2e:
            v = _num(e2e.get("tasks_per_s"))
            rows.append(
                Row(
                    "W5",
                    "whole run with workers, tasks/s",
                    v,
                    drain,
                    raw,
                    _ratio(v, drain),
                    "(no target)",
                )
            )
            if e2e.get("timed_out"):
                rows.append(
                    Row(
                        "W5",
                        f"whole run: timed out, {_num(e2e.get('tasks')) or 0:.0f} tasks done in "
                        f"{_num(e2e.get('seconds')) or 0:.0f} s",
                        None,
                    )
                )
            else:
                rows.append(Row("W5", "whole run with workers, s", _num(e2e.get("run_seconds"))))
    if "W6" in ran:
        v = _fig(results, "W6", "commits_per_task")
        rows.append(
            Row(
                "W6",
                "commits per task",
                v,
                target="≤ 3",
                passed=_check(v is not None and v <= 3, v),
            )
        )
    if "W7" in ran:
        one = _fig(results, "W7", "one_scheduler_tasks_per_s")
        two = _fig(results, "W7", "two_schedulers_tasks_per_s")
        rows.append(Row("W7", "with workers, 1 scheduler, tasks/s", one))
        rows.append(
            Row(
                "W7",
                "with workers, 2 schedulers, tasks/s",
                two,
                one,
                "1 scheduler",
                _ratio(two, one),
                "(workers decide the hops)",
            )
        )
        one = _fig(results, "W7", "alone_one_scheduler_runs_per_s")
        two = _fig(results, "W7", "alone_two_schedulers_runs_per_s")
        r = _ratio(two, one)
        rows.append(Row("W7", "schedulers alone, 1: runs started/s", one))
        rows.append(
            Row(
                "W7",
                "schedulers alone, 2: runs started/s",
                two,
                one,
                "1 scheduler",
                r,
                "≥ 1.3×",
                _check(r is not None and r >= 1.3, r),
            )
        )
    if "W8" in ran:
        pg_w1, pg_w2 = _fig(results, "W1", "tasks_per_s"), _fig(results, "W2", "hop_median_ms")
        v = _fig(results, "W8", "w1_tasks_per_s")
        r = _ratio(v, pg_w1)
        rows.append(
            Row(
                "W8",
                "standalone W1, tasks/s",
                v,
                pg_w1,
                "Sluice on PostgreSQL",
                r,
                "≥ 0.5× PostgreSQL",
                _check(r is not None and r >= 0.5, r),
            )
        )
        v = _fig(results, "W8", "w2_hop_median_ms")
        r = _ratio(v, pg_w2)
        rows.append(
            Row(
                "W8",
                "standalone W2 hop median, ms",
                v,
                pg_w2,
                "Sluice on PostgreSQL",
                r,
                "≤ 2× PostgreSQL",
                _check(r is not None and r <= 2, r),
            )
        )
    if "W9" in ran:
        tasks = _fig(results, "W9", "tasks") or 0
        runs = _fig(results, "W9", "runs") or 1
        for name, label in (
            ("dag_detail", "DAG detail"),
            ("grid", f"grid as the UI asks ({runs:.0f} runs, compact, first 200 rows)"),
            ("grid_whole", f"grid, all its rows ({runs:.0f} runs, compact)"),
        ):
            for when in ("cold", "warm"):
                v = _fig(results, "W9", f"{name}_{when}_ms")
                if v is None and name == "grid_whole":
                    continue
                rows.append(
                    Row(
                        "W9",
                        f"API {label} of a {tasks:.0f}-task DAG, {when}, ms",
                        v,
                        target="< 200 ms",
                        passed=_check(v is not None and v < 200, v),
                    )
                )
        for when in ("cold", "warm"):
            v = _fig(results, "W9", f"grid_cells_{when}_ms")
            if v is not None:
                label = f"API grid ({runs:.0f} runs, format=cells) of a {tasks:.0f}-task DAG"
                rows.append(Row("W9", f"{label}, {when}, ms", v, target="(no target)"))
    if "W10" in ran:
        v = _fig(results, "W10", "mark_to_start_median_ms")
        hop = _fig(results, "W2", "hop_median_ms")
        rows.append(
            Row(
                "W10",
                "mark success (CLI) to its downstream's start, median, ms",
                v,
                hop,
                "W2 hop" if hop is not None else "",
                _ratio(v, hop),
                "≤ 100 ms",
                _check(v is not None and v <= 100, v),
            )
        )
    if "W11" in ran:
        size = (results.get("settings") or {}).get("sizes") or {}
        v = _fig(results, "W11", "tasks_per_s")
        indexes = _num(size.get("w11_indexes")) or _fig(results, "W11", "tasks") or 0
        ref, label, r = _against_floor(results, "W11", v, drain)
        rows.append(
            Row(
                "W11",
                f"one run mapping {indexes:,.0f} no-op indexes, tasks/s",
                v,
                ref,
                label,
                r,
                "≥ 0.6× raw drain",
                _check(r is not None and r >= 0.6, r),
            )
        )
        v = _fig(results, "W11", "expansion_seconds")
        items = _num(size.get("w11_expand_items")) or _fig(results, "W11", "expansion_items") or 0
        rows.append(
            Row(
                "W11",
                f"expansion of {items:,.0f} items in one transaction, s",
                v,
                target="< 1 s",
                passed=_check(v is not None and v < 1, v),
            )
        )
    rows += _history_rows(results)
    rows += _deferral_rows(results)
    return rows


def _deferral_rows(results: dict[str, Any]) -> list[Row]:
    """W13: the resumes' lateness after their due time, and the triggerer's CPU and RSS."""
    if "W13" not in results["workloads"]:
        return []
    size = (results.get("settings") or {}).get("sizes") or {}
    tis = _num(size.get("w13_tis")) or _fig(results, "W13", "tis") or 0
    sleep = _num(size.get("w13_sleep_seconds")) or 0
    what = f"{tis:,.0f} TIs deferred on Sleep({sleep:g} s)"
    p95 = _fig(results, "W13", "resume_late_p95_ms")
    return [
        Row(
            "W13",
            f"{what}: resume after due, median, ms",
            _fig(results, "W13", "resume_late_median_ms"),
        ),
        Row(
            "W13",
            f"{what}: resume after due, p95, ms",
            p95,
            target="< 1,000 ms",
            passed=_check(p95 is not None and p95 < 1000, p95),
        ),
        Row(
            "W13",
            f"one triggerer's CPU while {tis:,.0f} TIs wait, s",
            _fig(results, "W13", "triggerer_cpu_seconds"),
            target="(no target)",
        ),
        Row(
            "W13",
            "one triggerer's peak RSS, MB",
            _fig(results, "W13", "triggerer_rss_mb"),
            target="(no target)",
        ),
    ]


_HISTORY_FIGURES = (
    ("tick_ms", "scheduler tick, ms"),
    ("dag_list_ms", "API DAG list, ms"),
    ("grid_ms", "API grid, ms"),
    ("run_list_ms", "API run list, ms"),
    ("w1_tasks_per_s", "W1 fan-out, tasks/s"),
    ("w2_hop_median_ms", "W2 hop median, ms"),
    ("w3_tasks_per_s", "W3 many runs, tasks/s"),
)


def _history_rows(results: dict[str, Any]) -> list[Row]:
    """W12: each figure with years of history against the same on a young database."""
    if "W12" not in results["workloads"]:
        return []
    loaded = _fig(results, "W12", "tis_loaded")
    rows = [Row("W12", "finished TIs loaded (with their runs and logs)", loaded)]
    for key, label in _HISTORY_FIGURES:
        v, ref = _fig(results, "W12", f"{key}_history"), _fig(results, "W12", f"{key}_empty")
        worse = _fig(results, "W12", f"{key}_slowdown")
        rows.append(
            Row(
                "W12",
                f"{label} with history",
                v,
                ref,
                "young database",
                worse,
                "≤ 1.2× worse",
                _check(worse is not None and worse <= 1.2, worse),
            )
        )
    for table in ("task_instance", "dag_run", "task_log"):
        v = _fig(results, "W12", f"seq_rows_read_{table}")
        rows.append(
            Row(
                "W12",
                f"rows of {table} read by sequential scans during the measurements",
                v,
                target="no whole-table scan",
                passed=_check(v is not None and loaded is not None and v < 0.05 * loaded, v),
            )
        )
    return rows


def _latency_rows(results: dict[str, Any]) -> list[Row]:
    """W1 and W2 with a delaying proxy between the workers and PostgreSQL (`bench.latency`):
    no target; W2's hop against plain W2's, its extra time and the round trips it makes
    (against the proxy at 0 ms), W1's tasks/s against plain W1's and the proxy's at 0 ms,
    and the worker's CPU a task."""
    ran = results["workloads"]
    rows: list[Row] = []
    for ms in DELAYS_MS:
        name = latency_name("W2", ms)
        if name not in ran:
            continue
        v = _fig(results, name, "hop_median_ms")
        ref = _fig(results, "W2", "hop_median_ms")
        at = f"workers ↔ PostgreSQL +{ms} ms"
        rows += [
            Row(name, f"hop median, {at}, ms", v, ref, "W2, direct", _ratio(v, ref)),
            Row(name, f"hop p95, {at}, ms", _fig(results, name, "hop_p95_ms")),
        ]
        if ms:
            rows += [
                Row(
                    name,
                    "extra a hop over the proxy at 0 ms, ms",
                    _fig(results, name, "extra_ms_per_hop"),
                ),
                Row(
                    name,
                    "round trips a hop waits for (extra / delay)",
                    _fig(results, name, "round_trips_per_hop"),
                ),
                Row(
                    name,
                    "delay the proxy added to a SELECT 1, over its 0 ms one, ms",
                    _delta(
                        _fig(results, name, "added_rtt_ms"),
                        _fig(results, latency_name("W2", 0), "added_rtt_ms"),
                    ),
                ),
                Row(
                    name,
                    "round trips a hop waits for (extra / that delay)",
                    _fig(results, name, "round_trips_per_hop_measured_delay"),
                ),
            ]
    for ms in DELAYS_MS:
        name = latency_name("W1", ms)
        if name not in ran:
            continue
        v = _fig(results, name, "tasks_per_s")
        ref = _fig(results, "W1", "tasks_per_s")
        at = f"workers ↔ PostgreSQL +{ms} ms"
        rows.append(Row(name, f"fan-out, {at}, tasks/s", v, ref, "W1, direct", _ratio(v, ref)))
        if ms:
            rows.append(
                Row(
                    name,
                    "tasks/s over the proxy's at 0 ms (paired rounds)",
                    _fig(results, name, "ratio_to_0ms_median"),
                )
            )
        rows.append(
            Row(name, "the worker's CPU a task, ms", _fig(results, name, "worker_cpu_ms_per_task"))
        )
        if not ms:
            rows.append(
                Row(
                    name, "the proxy's CPU a task, ms", _fig(results, name, "proxy_cpu_ms_per_task")
                )
            )
    return rows


def _rabbitmq_rows(results: dict[str, Any]) -> list[Row]:
    """W1-W3 with RabbitMQ as the broker, against raw Celery on RabbitMQ (same targets)."""
    floor = results.get("floor_amqp") or {}
    ran = results["workloads"]
    if not floor and not any(n in ran for n in ("W1R", "W2R", "W3R")):
        return []
    drain = _num(floor.get("drain_tasks_per_s"))
    rtt, rtt95 = _num(floor.get("rtt_median_ms")), _num(floor.get("rtt_p95_ms"))
    raw = "raw Celery on RabbitMQ"
    rows = [
        Row("floor (RabbitMQ)", "drain, tasks/s", drain),
        Row("floor (RabbitMQ)", "round trip median, ms", rtt),
        Row("floor (RabbitMQ)", "round trip p95, ms", rtt95),
    ]
    for name, what, least in (("W1R", "fan-out", 0.8), ("W3R", "many runs", 0.6)):
        if name in ran:
            v = _fig(results, name, "tasks_per_s")
            ref, label, r = _against_floor(results, name, v, drain)
            label = label.replace("raw Celery", raw)
            target = f"≥ {least:g}× raw drain"
            rows.append(
                Row(
                    name,
                    f"{what} on RabbitMQ, tasks/s",
                    v,
                    ref,
                    label,
                    r,
                    target,
                    _check(r is not None and r >= least, r),
                )
            )
    if "W2R" in ran:
        rows += _hop_rows(results, "W2R", " on RabbitMQ", rtt, rtt95, raw)
    return rows


def _hop_rows(
    results: dict[str, Any],
    name: str,
    where: str,
    rtt: float | None,
    rtt95: float | None,
    raw: str,
) -> list[Row]:
    """W2's (or W2R's) hop median and p95 against the floor's round trip (`_against_rtt`):
    targets ≤ 1.2× its median and ≤ 2× its p95."""
    rows = []
    for p95, floor, most in ((False, rtt, 1.2), (True, rtt95, 2.0)):
        v = _fig(results, name, "hop_p95_ms" if p95 else "hop_median_ms")
        ref, label, r = _against_rtt(results, name, v, floor, p95)
        what = "p95" if p95 else "median"
        rows.append(
            Row(
                name,
                f"hop {what}{where}, ms",
                v,
                ref,
                label.replace("raw Celery", raw),
                r,
                f"≤ {most:g}× raw {'p95' if p95 else 'RTT'}",
                _check(r is not None and r <= most, r),
            )
        )
    return rows


def _triggered_rows(results: dict[str, Any], name: str, how: str, drain: float | None) -> list[Row]:
    """W3's runs triggered through `how` (W3API, W3B: target ≥ 0.6× the raw drain; W3CLI:
    none): tasks/s from the first trigger sent to the last run's end, against the floor;
    the TIs' queued → start and the triggers' own latency (median and p95)."""
    runs = _fig(results, name, "runs") or 0
    v = _fig(results, name, "tasks_per_s")
    ref, label, r = _against_floor(results, name, v, drain)
    if name == "W3CLI":
        target, passed = "(no target)", None
    else:
        target, passed = "≥ 0.6× raw drain", _check(r is not None and r >= 0.6, r)
    trigger = "API request sent → response" if name != "W3CLI" else "CLI process start → exit"
    api_cpu = _fig(results, name, "api_cpu_ms_per_trigger")
    return [
        Row(
            name,
            f"{runs:.0f} runs via {how}, first trigger → last run's end, tasks/s",
            v,
            ref,
            label,
            r,
            target,
            passed,
        ),
        Row(
            name, "TI queued → start, median, ms", _fig(results, name, "queued_to_start_median_ms")
        ),
        Row(name, "TI queued → start, p95, ms", _fig(results, name, "queued_to_start_p95_ms")),
        Row(name, f"trigger ({trigger}), median, ms", _fig(results, name, "trigger_median_ms")),
        Row(name, f"trigger ({trigger}), p95, ms", _fig(results, name, "trigger_p95_ms")),
        *([] if name == "W3CLI" else [Row(name, "the API's CPU a trigger, ms", api_cpu)]),
    ]


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _verdict(passed: bool | None) -> str:
    return {True: "pass", False: "**FAIL**", None: ""}[passed]


def _table(header: str, rows: list[Row]) -> list[str]:
    """A markdown table of `rows`, one line each: the same cells in RESULTS.md and the
    README (only their header differs)."""
    lines = [header, "|---|---|---:|---|---:|---|---|"]
    for row in rows:
        ref = f"{_fmt(row.reference)} ({row.reference_label})" if row.reference is not None else ""
        lines.append(
            f"| {row.workload} | {row.metric} | {_fmt(row.value)} | {ref} | "
            f"{_fmt(row.ratio) + '×' if row.ratio is not None else ''} | {row.target} | "
            f"{_verdict(row.passed)} |"
        )
    return lines


def headline_rows(rows: list[Row]) -> list[Row]:
    """The README's rows, in the full table's order: the floor's drain and round trip,
    and every row with a target but W9's cold requests and W12's counts of rows scanned
    (RESULTS.md has them, and the rows that only inform)."""
    return [row for row in rows if _headline(row)]


def _headline(row: Row) -> bool:
    if row.workload == "floor":
        return row.metric in ("drain, tasks/s", "round trip median, ms")
    if not row.target or row.target.startswith("("):  # "(no target)", "(reference: …)"
        return False
    if row.workload == "W9":
        return ", warm, " in row.metric
    if row.workload == "W12":
        return row.reference_label == "young database"
    return True


README_TABLE = ("<!-- bench:table -->\n", "<!-- /bench:table -->\n")
"""The markers around the README's table, which `write_readme_table` rewrites."""


def readme_table(results: dict[str, Any], rows: list[Row]) -> str:
    """What goes between README_TABLE's markers: the run's date and mode, and the
    headline rows of the full table."""
    m = results["machine"]
    lines = [
        f"Latest run: {results['date']}, {results['mode']} mode, {m['nproc']} CPUs ({m['cpu']}).",
        "",
        *_table(
            "| workload | what | Sluice | raw Celery / reference | ratio | target | result |",
            headline_rows(rows),
        ),
        "",  # the end marker is not read as a row
    ]
    return "\n".join(lines) + "\n"


def _around_table(readme: str) -> tuple[str, str, str]:
    """`readme` up to its table's start marker (included), the table, and the rest from
    its end marker on; ValueError without the markers."""
    start, end = README_TABLE
    before, found, rest = readme.partition(start)
    table, found_end, after = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"the README has no {start.strip()} … {end.strip()} markers")
    return before + start, table, end + after


def with_readme_table(readme: str, table: str) -> str:
    """`readme` with `table` between README_TABLE's markers."""
    before, _, after = _around_table(readme)
    return before + table + after


def readme_table_in(readme: str) -> str:
    """What stands between README_TABLE's markers in `readme`."""
    return _around_table(readme)[1]


def write_readme_table(results: dict[str, Any], rows: list[Row], path: Path = README) -> None:
    path.write_text(with_readme_table(path.read_text(), readme_table(results, rows)))


def render_markdown(results: dict[str, Any], rows: list[Row], kept: str) -> str:
    m = results["machine"]
    lines = [
        "# Sluice benchmark results",
        "",
        f"Generated by `python -m bench{' --quick' if results['mode'] == 'quick' else ''}` "
        f"on {results['date']} ({results['mode']} mode, {results['elapsed_seconds']:.0f} s).",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, "
        f"PostgreSQL {m.get('postgres', '?')}, Redis {m.get('redis', '?')}, "
        f"Celery {m.get('celery', '?')}; code at {m.get('git', '?')}; "
        f"load average {m.get('load_start', '?')} at the start, "
        f"{m.get('load_end', '?')} at the end (other work shares this machine: numbers are noisy).",
        "",
        *_table("| workload | metric | Sluice | reference | ratio | target | result |", rows),
    ]
    errors = {w: e["error"] for w, e in results["workloads"].items() if e.get("error")}
    if errors:
        lines += ["", "Errors:", ""] + [f"- {w}: `{e.splitlines()[0]}`" for w, e in errors.items()]
    disturbed = [w for w, e in results["workloads"].items() if e.get("disturbed")]
    disturbed += [
        f"{w} end to end"
        for w, e in results["workloads"].items()
        if (e.get("end_to_end") or {}).get("disturbed")
    ]
    if disturbed:
        lines += [
            "",
            f"Disturbed (another process flushed a bench Redis db): {', '.join(disturbed)}.",
        ]
    lines += _runs_lines(results)
    lines += ["", "Details per workload (every figure) are in `results.json`.", ""]
    lines += _methods_lines(results)
    body = "\n".join(lines) + "\n"
    return body + ("\n" + kept if kept else "")


_RUN_UNITS = {
    "paired_ratio": "ratio to the floor's drain just before",
    "paired_floor_drain": "floor drain just before, tasks/s",
    "paired_rtt_ms": "floor round trip just before, median ms",
    "paired_rtt_p95_ms": "floor round trip just before, p95 ms",
    "paired_hop_ratio": "hop median's ratio to the floor's round trip just before",
    "paired_hop_p95_ratio": "hop p95's ratio to the floor's p95 just before",
    "alone_one_scheduler_runs_per_s": "1 scheduler alone, runs/s",
    "alone_two_schedulers_runs_per_s": "2 schedulers alone, runs/s",
    "expansion_seconds": "expansion, s",
}


def _runs_lines(results: dict[str, Any]) -> list[str]:
    """Each repeated measurement's runs, in the order they ran (the table has the median)."""
    found = [("floor drain", (results.get("floor") or {}).get("drain_runs"))]
    found += [(name, entry.get("runs")) for name, entry in results["workloads"].items()]
    parts = []
    for name, runs in found:
        for metric, values in (runs or {}).items():
            if len(values) > 1:
                listed = ", ".join(_fmt(v) for v in values)
                unit = _RUN_UNITS.get(metric, metric)
                unit = "tasks/s" if metric.endswith("tasks_per_s") else unit
                parts.append(f"{name} {unit} {listed}")
    if not parts:
        return []
    return ["", f"Runs behind the medians: {'; '.join(parts)}."]


def _methods_lines(results: dict[str, Any]) -> list[str]:
    """RESULTS.md's "## Methods": how to run the bench, how it measures, the targets and
    the probe. Constant but for the settings: a run's own figures are in the table above
    and in the notes below."""
    return [
        METHODS,
        "",
        "### Running it",
        "",
        "`python -m bench` needs PostgreSQL and Redis (dbs 14 and 15) on 127.0.0.1, and",
        "RabbitMQ with `rabbitmqctl` for W1R-W3R; `--quick` for a smoke run in under a minute,",
        "`--only W1,W2` for some workloads, `--profile DIR` to record py-spy profiles, `--out",
        "DIR` to write elsewhere than `bench/`. It starts its own `sluice scheduler` and",
        "`sluice worker -c 4`, runs the workloads beside a bare Celery app (the floor, raw",
        "Celery) on the same brokers, and writes this file (but for the notes from",
        '"What changed" on, which it keeps), `bench/results.json` and the table of the',
        "README's Benchmarks section (the table above's headline rows). `python -m",
        "bench.report` writes the three again from `bench/results.json` without running",
        "anything.",
        "",
        "The workloads: W1, one run of a 200-wide fan-out (202 tasks); W2, runs of a 50-task",
        "chain, a hop being one task's end to the next one's start; W3, 20 runs at once of",
        "an 8-wide diamond (10 tasks); W4, a scheduler tick (in-process) with 10, 100 and",
        "1,000 idle DAGs; W5, one scheduling pass over a 10,000-task run, then that run with",
        "the workers; W6, PostgreSQL's commits a task over W1's runs; W8, `sluice standalone",
        "--trigger` (SQLite, the embedded broker) on W1's and W2's shapes. The others below.",
        "`--quick` makes them all small.",
        "",
        "### How it was measured",
        "",
        *_settings_lines(results),
        "",
        "### The targets",
        "",
        "Each is in the table's target column. A throughput is measured against raw Celery's",
        "drain on the same broker: W1 and W1R ≥ 0.8×; W3, W3API, W3B, W3R and W11 ≥ 0.6×",
        "(W3CLI has none: a `sluice` process takes seconds to start). A hop against raw",
        "Celery's round trip (W2, W2R): its median ≤ 1.2× the round trip's, its p95 ≤ 2×.",
        "The others: a tick that does not grow with idle DAGs (W4, the most against the",
        "fewest ≤ 1.5×), a pass over W5's run ≤ 1.5 s, ≤ 3 commits a task (W6), two",
        "schedulers alone ≥ 1.3× one (W7), standalone ≥ 0.5× PostgreSQL's W1 and ≤ 2× its W2",
        "hop (W8), the API's reads < 200 ms (W9), a mark to its downstream's start ≤ 100 ms",
        "(W10), W11's expansion in one transaction < 1 s, with years of history ≤ 1.2×",
        "worse than on a young database and no whole-table scan (W12), and deferred TIs",
        "resumed < 1 s after their due time at the p95 (W13). Raw Celery's drain",
        "keeps both cores busy too, so a throughput's ratio is raw Celery's CPU a task over",
        "Sluice's: where Sluice's goes, and what to scale first, is in",
        "[docs/capacity.md](../docs/capacity.md).",
        "",
        "### Comparing two versions: the probe",
        "",
        "On this noisy machine, compare two versions of the code with `python -m bench.probe",
        "--dag w1 --runs 10` run in a checkout of each alternately (A-B-B-A, each checkout with",
        "its own venv: [CONTRIBUTING.md](../CONTRIBUTING.md)). It repeats one workload (`w1`,",
        "`w2`, `w3`, `w5`, `w7`, `w11`, or `raw` for raw Celery's drains; `--schedulers 2`,",
        "`--concurrency 1` for a worker that leaves a core to a profiler, `--per-trigger 100`",
        "for a burst of 100 runs, `--slots N` for the default pool's slots, `--env NAME=VALUE`",
        "for a setting such as `SLUICE_SCHEDULE_AFTER_TASK=false`, `--broker amqp://…` for",
        "RabbitMQ; `--help` for the rest) and prints tasks/s, CPU per task of every process",
        "(PostgreSQL's, Redis's and RabbitMQ's included), and lock waits.",
    ]


def _settings_lines(results: dict[str, Any]) -> list[str]:
    s = results["settings"]
    return [
        "One `sluice scheduler` and one `sluice worker -c 4` (prefork) as subprocesses on a",
        "fresh PostgreSQL database, broker Redis db 14; the floor is a bare Celery app on",
        "Redis db 15 with the same worker settings (prefork -c 4, acks_late,",
        "prefetch 1, JSON) and a Redis result backend. Timings come from the database's own",
        "timestamps (task start_date/end_date), the floor's from the task's own clock.",
        "The floor's drain is measured before the Sluice workloads and again after them",
        "(full mode: three drains, then two): its figure is the median of all of them.",
        "In full mode W1, W3 (W3API, W3B, W3CLI) and W11 are also paired with the floor: the",
        "floor's worker runs beside them and drains 200 tasks just before each of their runs;",
        "their ratio is the median of the per-run ratios (reference: the median of those",
        "drains), as this VM's speed drifts by tens of percent within minutes. W2 (and W2R)",
        "likewise: each chain follows as many of the floor's round trips as it has hops,",
        "and its hop median and p95 are divided by theirs.",
        "W3API, W3B, W3CLI: W3's DAG triggered as users trigger it, each batch paired with",
        "the floor as W3. W3API (20 runs) and W3B (100 runs): `POST /api/v1/dags/{id}/runs`",
        '(`{"run_id": …}`, bearer token) to a `sluice api` process the bench starts, from',
        "20 threads at once, each with its own keep-alive connection opened first; W3CLI: 20",
        "`sluice dags trigger ID --run-id R` processes started at once. tasks/s from the",
        "first trigger sent (bench's wall clock) to the last run's end (database clock); the",
        "triggers' latency: request sent → response, or the process's start → exit.",
        "W7 is measured twice. With workers: runs of a chain with one scheduler, then two",
        "(A-B-B-A), tasks/s; workers decide every hop, so the schedulers have little to do.",
        "Schedulers alone: no worker, each phase on a database of its own with the default",
        "pool opened to the runs' count; a trigger of many runs at once, and runs/s from the",
        "trigger's commit to a first task of every run in the Redis queue (bench's clock),",
        "one scheduler then two (A-B-B-A): what the schedulers themselves do for many small",
        "runs (start, decide, queue, publish), as Airflow's scheduler benchmark measures its",
        "scheduler with the executor short-circuited.",
        "W9 drives the REST API app in-process (no network) on a 10,000-task DAG with 25",
        "runs: the DAG detail, then the grid of all 25 as the web UI asks for it",
        "(format=compact: one string of states per run, of the 200 rows it shows), the whole",
        "compact grid (10,000 rows), then the same grid in the default format (a cell object",
        "per TI, no target); the first request of each (cold: the DAG's",
        "task order and task list computed by the first that needs them) and the median of",
        "five more (warm); the heap is settled and one DAG-list request made first, as",
        "`sluice api` serves.",
        "W10: five runs of first >> hold >> after, one at a time; while `hold` runs,",
        "`sluice tasks mark … hold --state success` (a process, as a user runs it) marks it;",
        "the figure is from the mark's audit event to the start of `after` (database clock).",
        "W11: runs of items() >> noop.expand(x=items()), `items` returning 1,000 items, one at",
        "a time, triggered as W1's; tasks/s over the 1,000 indexes alone (first index's start",
        "to last index's end), against the paired drain as W1; the schedulers expand the task",
        "and queue its indexes (workers leave mapped tasks to them). The expansion is timed",
        "in-process on a database of its own: a fresh run whose `items` succeeded with 10,000",
        "items (started by the scheduler's own pass, the result written as a worker writes",
        "it), then one transaction as a pass makes it (the run claimed FOR NO KEY UPDATE,",
        "`update_state`, the commit) that writes the 10,000 indexes, scheduled; the median of",
        "five such runs.",
        "W12: the same figures on two databases of their own, young (10 finished runs of each",
        "DAG, what the DAG list shows) and with years of history: finished runs of 100",
        "20-task DAGs (1,000,000 TIs with their runs and logs) bulk-loaded as Sluice writes",
        "them, then VACUUM (ANALYZE) and CHECKPOINT; in rounds that alternate the two",
        "databases (three each in full mode, A-B-A-B-A-B: the VM's speed drifts within a",
        "minute), the scheduler's",
        "tick in-process, the API's DAG list, grid (100 runs × 50 tasks) and run list",
        "in-process (warm medians), W1-W3 with a live scheduler and worker started for the",
        "round; each figure the median of its rounds; and the rows sequential scans of the",
        "big tables read during the history rounds (pg_stat_user_tables).",
        "W13: one run of items() >> wait.expand(i=items()), `items` returning 1,000 items,",
        "each index calling `sluice.defer(Sleep(5 s))` on its first try and returning at once",
        "on its resume; one `sluice triggerer` (capacity 1,000) started for it. A resume's",
        "lateness: the TI's `scheduled_at` (stamped as the triggerer moves it deferred →",
        "scheduled) minus the due time in its trigger's event (`waiting`), database clock;",
        "the triggerer's CPU (/proc) from just before the run's trigger to the last resume,",
        "and its peak RSS (VmHWM) then.",
        "W1R, W2R, W3R: W1, W2 and W3 again on a second deployment whose broker is RabbitMQ",
        "(a vhost of the bench's own, wake-ups over PostgreSQL LISTEN/NOTIFY as there is no",
        "Redis), against the floor's app on the same RabbitMQ (results in its Redis db),",
        "measured and paired the same way; the targets are W1's, W2's and W3's.",
        "W1+0ms … W2+10ms: W1 and W2 with the workers' PostgreSQL 0, 2 and 10 ms further",
        "a round trip (a cross-zone deployment; no tc netem on this machine): the worker",
        "(-c 4, started again for them) reaches PostgreSQL through a TCP proxy of the",
        "bench's, a process of its own that holds every chunk half the delay each way; the",
        "scheduler keeps its direct link. In rounds (three in full mode), each one W2 chain",
        "and one W1 run at 0, 2 then 10 ms, the worker's pooled connections kept; W2's hop",
        "median pools the rounds' hops, its extra over the proxy at 0 ms divided by the",
        "delay is the round trips a hop waits for; W1's ratio to the proxy at 0 ms is the",
        "median of the rounds' ratios. No target: what a hop and a task cost per ms of",
        "latency is in [docs/capacity.md](../docs/capacity.md).",
        f"Settings: SLUICE_LOOP_INTERVAL={s['loop_interval']}, "
        f"SLUICE_DAG_REFRESH_INTERVAL=0.5, other settings at their defaults; DAGs have",
        "max_active_runs/max_active_tasks high enough that only the default pool (128 slots)",
        "and the 4 worker processes bound concurrency.",
    ]


def kept_section(path: Path) -> str:
    """The hand-written tail of an existing RESULTS.md (from KEEP_FROM on), or ''."""
    if not path.exists():
        return ""
    text = path.read_text()
    found = KEEP_FROM.search(text)
    return text[found.start() :] if found else ""


def _clean(value: Any) -> Any:
    """NaN/inf become null: results.json stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_reports(results: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """results.json and RESULTS.md in `out`; in bench/ (the default), also the README's
    table, which shows bench/results.json (elsewhere the README is left alone)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = rows_for(results)
    results = {**results, "rows": [asdict(r) for r in rows]}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(_clean(results), indent=2, allow_nan=False) + "\n")
    md_path = out / "RESULTS.md"
    md_path.write_text(render_markdown(results, rows, kept_section(md_path)))
    if out.resolve() == BENCH_DIR:
        write_readme_table(results, rows)
    return md_path, json_path


def stored_results(out: Path = BENCH_DIR) -> dict[str, Any]:
    """A run's results as it handed them to write_reports, from its results.json."""
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    results.pop("rows", None)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.report",
        description="Write RESULTS.md, results.json and the README's table again from "
        "the stored results.json, without running the bench: after a change to this module.",
    )
    p.add_argument("--out", default=str(BENCH_DIR), help="the results' directory (bench/)")
    out = Path(p.parse_args(argv).out)
    md, js = write_reports(stored_results(out), out)
    readme = f" and the table of {README}" if out.resolve() == BENCH_DIR else ""
    print(f"bench: wrote {md}, {js}{readme} from {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
