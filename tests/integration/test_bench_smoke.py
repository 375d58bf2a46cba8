"""The benchmark command runs end to end on tiny workloads (`python -m bench --quick`).

No timing is asserted: only that it exits 0 and reports numeric figures for every
workload. It needs PostgreSQL and runs on the tests' own Redis (dbs 14 and 15); without them it
is skipped locally and fails under CI=true.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from tests.conftest import IN_CI, PG_ADMIN_URL
from tests.redis_server import session_redis

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ["W1", "W2", "W3", "W3API", "W3B", "W3CLI", "W4", "W5", "W6", "W7", "W8", "W11"]
WORKLOADS += ["W12", "W13", "W1R", "W2R", "W3R"]
WORKLOADS += ["W1+0ms", "W1+2ms", "W1+10ms", "W2+0ms", "W2+2ms", "W2+10ms"]


def _require_services() -> None:
    problems = []
    engine = create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        problems.append(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc.orig}")
    finally:
        engine.dispose()
    try:
        session_redis()
    except RuntimeError as exc:
        problems.append(str(exc))
    if problems:
        reason = "; ".join(problems)
        if IN_CI:
            pytest.fail(f"{reason} (required under CI=true)")
        pytest.skip(reason)


@pytest.mark.long
@pytest.mark.timeout(420)
def test_bench_quick_reports_every_workload(tmp_path: Path) -> None:
    _require_services()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env["SLUICE_BENCH_PG_ADMIN_URL"] = PG_ADMIN_URL
    env["SLUICE_BENCH_REDIS_HOST"] = "127.0.0.1"
    env["SLUICE_BENCH_REDIS_PORT"] = str(session_redis().port)  # the tests' own Redis
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,  # 105 s on a quiet VM, 174 s on a loaded one
    )
    assert done.returncode == 0, f"bench failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"

    results = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "RESULTS.md").read_text().startswith("# Sluice benchmark results")
    assert results["mode"] == "quick"
    floor = results["floor"]
    for key in ("drain_tasks_per_s", "rtt_median_ms", "rtt_p95_ms"):
        assert _is_number(floor[key]), (key, floor)
    for name in WORKLOADS:
        entry = results["workloads"].get(name)
        assert entry is not None, f"no entry for {name}"
        assert "error" not in entry, entry
        figures = entry["figures"]
        assert figures, f"{name} has no figures"
        bad = {k: v for k, v in figures.items() if not _is_number(v)}
        assert not bad, f"{name} has non-numeric figures: {bad}"
    assert results["rows"], "no table rows"
    for name in ("W3API", "W3B"):  # the API process's CPU a trigger, read from /proc
        assert results["workloads"][name]["figures"]["api_cpu_ms_per_trigger"] >= 0


def _is_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
