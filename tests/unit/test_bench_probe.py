"""`python -m bench.probe --per-trigger N`: how many runs a trigger creates and how many
tasks the probe divides its CPU by."""

from __future__ import annotations

import pytest

from bench.probe import DAGS, main, workload


def test_a_workload_keeps_its_own_runs_per_trigger_by_default() -> None:
    assert workload("w3") == DAGS["w3"]
    assert workload("w1")[1:] == (1, 202)


def test_per_trigger_scales_the_tasks_of_a_trigger_by_its_runs() -> None:
    call, runs, tasks = workload("w3", 100)
    assert (call, runs, tasks) == (DAGS["w3"][0], 100, 1000)  # W3's 10-task diamond
    assert workload("w7", 1)[1:] == (1, 5)  # a 5-task chain


def test_per_trigger_below_one_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--dag", "w3", "--per-trigger", "0"])
    assert stopped.value.code == 2
    assert "--per-trigger must be at least 1" in capsys.readouterr().err
