"""The checker's reading of the hosts' tries files: what it finds wrong, from lines as
the tasks write them (`tests.hosts.dag`)."""

from __future__ import annotations

from pathlib import Path

from tests.hosts.checker import body_problems, read_bodies

KEY = ("r00", "a", -1)


def write(root: Path, host: str, *lines: str) -> None:
    (root / host).mkdir(parents=True, exist_ok=True)
    (root / host / "tries.log").write_text("".join(f"{line}\n" for line in lines))


def problems(root: Path, *, bodies_once: bool) -> list[str]:
    bodies = sorted((b for b in read_bodies(root) if b.ti == KEY), key=lambda b: b.start_ns)
    return body_problems(KEY, bodies, bodies_once=bodies_once)


def test_one_body_start_to_end_is_right(tmp_path: Path) -> None:
    write(tmp_path, "w1", "start r00 a -1 1 x w1 7 100", "end r00 a -1 1 x w1 7 200")
    assert problems(tmp_path, bodies_once=True) == []


def test_two_tries_one_after_the_other_are_right_when_bodies_may_run_again(
    tmp_path: Path,
) -> None:
    write(tmp_path, "w1", "start r00 a -1 1 x w1 7 100", "end r00 a -1 1 x w1 7 200")
    write(tmp_path, "w2", "start r00 a -1 2 y w2 8 300", "end r00 a -1 2 y w2 8 400")
    assert problems(tmp_path, bodies_once=False) == []
    assert ["body ran 2 times" in p for p in problems(tmp_path, bodies_once=True)] == [True]


def test_overlapping_tries_on_two_hosts_are_found(tmp_path: Path) -> None:
    write(tmp_path, "w1", "start r00 a -1 1 x w1 7 100", "end r00 a -1 1 x w1 7 300")
    write(tmp_path, "w2", "start r00 a -1 1 x w2 8 200", "end r00 a -1 1 x w2 8 400")
    found = problems(tmp_path, bodies_once=False)
    assert len(found) == 1 and "two tries overlap" in found[0]


def test_a_body_cut_short_is_found(tmp_path: Path) -> None:
    write(tmp_path, "w1", "start r00 a -1 1 x w1 7 100")
    write(tmp_path, "w2", "start r00 a -1 2 y w2 8 300", "end r00 a -1 2 y w2 8 400")
    found = problems(tmp_path, bodies_once=False)
    assert any("cut short" in p for p in found) and any("overlap" in p for p in found)


def test_the_same_pid_running_a_try_twice_pairs_each_start_with_its_end(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "w1",
        "start r00 a -1 1 x w1 7 100",
        "end r00 a -1 1 x w1 7 200",
        "start r00 a -1 1 x w1 7 300",
        "end r00 a -1 1 x w1 7 400",
    )
    bodies = read_bodies(tmp_path)
    assert sorted((b.start_ns, b.end_ns) for b in bodies) == [(100, 200), (300, 400)]
    assert problems(tmp_path, bodies_once=False) == []
