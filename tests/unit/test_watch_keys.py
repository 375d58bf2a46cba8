"""A watch's run keys: each key's run id is derived, cleaned and bounded, and two keys
never share one; bad keys and watches are one line."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sluice.scheduler.scheduling.dagrun import RUN_ID_MAX, check_run_id
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.watch import RunRequest, Watch, run_id_of


def test_a_plain_key_is_its_run_id() -> None:
    assert run_id_of("sample-42.fastq") == "watch__sample-42.fastq"


@pytest.mark.parametrize("key", ["a/b", "a b", "x" * 2000, "ünï/cödé", "a_b"])
def test_run_ids_are_valid_bounded_and_distinct(key: str) -> None:
    run_id = run_id_of(key)
    assert check_run_id(run_id) == run_id and len(run_id) <= RUN_ID_MAX
    assert run_id == run_id_of(key)  # the same key, the same run
    assert run_id_of(key + "!") != run_id


def test_cleaned_keys_do_not_collide() -> None:
    assert run_id_of("a/b") != run_id_of("a_b")
    assert run_id_of("x" * 300) != run_id_of("x" * 301)


@pytest.mark.parametrize("key", ["", "a\nb", "x" * 1001, 7])
def test_a_bad_key_is_refused(key: object) -> None:
    with pytest.raises(ValueError):
        RunRequest(key)  # type: ignore[arg-type]


def test_a_watch_needs_a_function_and_a_positive_interval() -> None:
    assert Watch(lambda c: [], interval=timedelta(seconds=5)).interval == 5.0
    with pytest.raises(DagDefinitionError):
        Watch("not callable")  # type: ignore[arg-type]
    with pytest.raises(DagDefinitionError):
        Watch(lambda c: [], interval=0)
